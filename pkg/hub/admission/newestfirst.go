package admission

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
// then often outlasts it and the work of both ends is lost. Served newest
// first, a connection is either
// handshaken soon after it arrives, with its agent's whole timeout ahead,
// or waits out the wait and is closed, its agent backing off. This is the
// adaptive LIFO that request queues under overload use (Facebook's
// "Fail at Scale"); with no line, the order makes no difference.
type newestFirst struct {
	mu          sync.Mutex
	limit, free int
	// perSource caps the places one source address holds, so a single
	// address (an attacker's, or one site's) never holds them all.
	perSource int
	held      map[string]int
	// waiting is a stack; entries that gave up or were served out of
	// order stay until popped or compacted away (dead counts them).
	waiting []*placeWaiter
	dead    int
	// queued gets a token when a connection starts waiting while none
	// did: a wave begins (see followWaves).
	queued chan struct{}
}

type placeWaiter struct {
	src   string
	given chan struct{} // closed when the waiter is given a place
	done  bool          // given a place or gave up; guarded by mu
}

func newNewestFirst(n int) *newestFirst { return newNewestFirstPerSource(n, n) }

// newNewestFirstPerSource hands out n places, at most perSource of them to
// one source.
func newNewestFirstPerSource(n, perSource int) *newestFirst {
	return &newestFirst{limit: n, free: n, perSource: max(perSource, 1), held: map[string]int{},
		queued: make(chan struct{}, 1)}
}

// take takes a place for src, waiting up to wait (none if wait is not
// positive) or until ctx ends.
func (p *newestFirst) take(ctx context.Context, src string, wait time.Duration) bool {
	p.mu.Lock()
	if p.free > 0 && p.held[src] < p.perSource {
		p.free--
		p.held[src]++
		p.mu.Unlock()
		return true
	}
	if wait <= 0 {
		p.mu.Unlock()
		return false
	}
	w := &placeWaiter{src: src, given: make(chan struct{})}
	if len(p.waiting) == p.dead {
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
	p.dead++
	if p.dead > 64 && p.dead > len(p.waiting)/2 {
		p.compact()
	}
	return false
}

// release gives src's place back: to the newest waiter whose source may
// hold one more, if any.
func (p *newestFirst) release(src string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[src]--; p.held[src] <= 0 {
		delete(p.held, src)
	}
	for i := len(p.waiting) - 1; i >= 0; i-- {
		w := p.waiting[i]
		if !w.done && p.held[w.src] >= p.perSource {
			continue
		}
		if i == len(p.waiting)-1 {
			p.waiting[i] = nil
			p.waiting = p.waiting[:i]
			if w.done {
				p.dead--
				continue
			}
		} else if w.done {
			continue
		} else {
			p.dead++ // served out of order: its entry stays, dead
		}
		w.done = true
		p.held[w.src]++
		close(w.given)
		return
	}
	p.free++
}

// waiters is the number of connections waiting for a place now.
func (p *newestFirst) waiters() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiting) - p.dead
}

// inUse is the number of places taken.
func (p *newestFirst) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limit - p.free
}

// compact drops the entries of waiters that are done, keeping the others'
// order.
func (p *newestFirst) compact() {
	kept := p.waiting[:0]
	for _, w := range p.waiting {
		if !w.done {
			kept = append(kept, w)
		}
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	p.dead = 0
}
