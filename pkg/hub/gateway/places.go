package gateway

import (
	"context"
	"sync"
	"time"
)

// newestFirst hands out a fixed number of places; when none is free, the
// one that frees goes to the newest of those waiting.
//
// Why newest first: after an outage a fleet dials faster than handshakes
// finish, and a line forms. Served in arrival order, every connection
// would wait nearly the whole wait and come to its handshake with little
// of its agent's 15-s dial timeout left; on a loaded machine the handshake
// then often outlasts it and the work of both ends is lost (3,284 times in
// a 10,000-agent cold start). Served newest first, a connection is either
// handshaken soon after it arrives, with its agent's whole timeout ahead,
// or waits out the wait and is closed, its agent backing off. This is the
// adaptive LIFO that request queues under overload use (Facebook's
// "Fail at Scale"); with no line, the order makes no difference.
type newestFirst struct {
	mu          sync.Mutex
	limit, free int
	// waiting is a stack; entries that gave up stay until popped or
	// compacted away.
	waiting []*placeWaiter
	gaveUp  int
	// queued gets a token when a connection starts waiting while none
	// did: a crowd begins (see relaxGCInCrowds).
	queued chan struct{}
}

type placeWaiter struct {
	given chan struct{} // closed when the waiter is given a place
	done  bool          // given a place or gave up; guarded by mu
}

func newNewestFirst(n int) *newestFirst {
	return &newestFirst{limit: n, free: n, queued: make(chan struct{}, 1)}
}

// take takes a place, waiting up to wait (none if wait is not positive)
// or until ctx ends.
func (p *newestFirst) take(ctx context.Context, wait time.Duration) bool {
	p.mu.Lock()
	if p.free > 0 {
		p.free--
		p.mu.Unlock()
		return true
	}
	if wait <= 0 {
		p.mu.Unlock()
		return false
	}
	w := &placeWaiter{given: make(chan struct{})}
	if len(p.waiting) == p.gaveUp {
		select {
		case p.queued <- struct{}{}:
		default:
		}
	}
	p.waiting = append(p.waiting, w)
	p.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.given:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.done {
		return true // given a place as the wait ran out
	}
	w.done = true
	p.gaveUp++
	if p.gaveUp > 64 && p.gaveUp > len(p.waiting)/2 {
		p.compact()
	}
	return false
}

// release gives a place back: to the newest waiter, if any.
func (p *newestFirst) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.waiting); n > 0; n = len(p.waiting) {
		w := p.waiting[n-1]
		p.waiting[n-1] = nil
		p.waiting = p.waiting[:n-1]
		if w.done {
			p.gaveUp--
			continue
		}
		w.done = true
		close(w.given)
		return
	}
	p.free++
}

// waiters is the number of connections waiting for a place now.
func (p *newestFirst) waiters() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting) - p.gaveUp
}

// inUse is the number of places taken.
func (p *newestFirst) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit - p.free
}

// compact drops the waiters that gave up, keeping the others' order.
func (p *newestFirst) compact() {
	kept := p.waiting[:0]
	for _, w := range p.waiting {
		if !w.done {
			kept = append(kept, w)
		}
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	p.gaveUp = 0
}
