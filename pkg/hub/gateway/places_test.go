package gateway

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// A freed place goes to the newest waiter; a waiter that gave up takes
// none, and every place given back can be taken again.
func TestPlacesGoToTheNewestWaiter(t *testing.T) {
	p := newNewestFirst(1)
	ctx := context.Background()
	if !p.take(ctx, 0) {
		t.Fatal("the only place was not free")
	}
	if p.take(ctx, 0) {
		t.Fatal("a second place was given with a limit of 1")
	}
	// waiter queues one taker and returns a channel with its outcome once
	// it is in line.
	waiter := func(wait time.Duration) <-chan bool {
		got := make(chan bool, 1)
		p.mu.Lock()
		n := len(p.waiting)
		p.mu.Unlock()
		go func() { got <- p.take(ctx, wait) }()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			p.mu.Lock()
			queued := len(p.waiting) > n
			p.mu.Unlock()
			if queued {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatal("the waiter never got in line")
			}
		}
	}
	oldest := waiter(time.Minute)
	quitter := waiter(50 * time.Millisecond)
	if <-quitter {
		t.Fatal("a waiter was given a place none freed")
	}
	newest := waiter(time.Minute)

	p.release()
	select {
	case ok := <-newest:
		if !ok {
			t.Fatal("the newest waiter gave up")
		}
	case <-oldest:
		t.Fatal("the freed place went to the oldest waiter, want the newest")
	case <-time.After(10 * time.Second):
		t.Fatal("the freed place went to no one")
	}
	p.release()
	if !<-oldest {
		t.Fatal("the oldest waiter was not served by the next place")
	}
	p.release()
	if got := p.inUse(); got != 0 {
		t.Errorf("%d places in use after all were given back, want 0", got)
	}
	if !p.take(ctx, 0) || p.take(ctx, 0) {
		t.Error("after the line emptied, want exactly one place free")
	}
}

// Waiters that give up are dropped from the line in bulk, so a line
// under lasting overload does not grow without bound.
func TestPlacesForgetWaitersThatGaveUp(t *testing.T) {
	p := newNewestFirst(1)
	ctx := context.Background()
	p.take(ctx, 0)
	done := make(chan bool)
	for range 500 {
		go func() { done <- p.take(ctx, time.Millisecond) }()
	}
	for range 500 {
		if <-done {
			t.Fatal("a waiter was given a place none freed")
		}
	}
	p.mu.Lock()
	left := len(p.waiting)
	p.mu.Unlock()
	if left > 200 {
		t.Errorf("%d of 500 waiters that gave up are still in line", left)
	}
	p.release()
	if p.inUse() != 0 {
		t.Error("the place given back was lost among the waiters that gave up")
	}
}

// Recording a connection waits while TLS handshakes queue for a place,
// and goes on once the last waiter is served or gives up.
func TestConnectivityWritesYieldToQueuedHandshakes(t *testing.T) {
	ctx := context.Background()
	p := newNewestFirst(1)
	s := &Server{}
	s.tlsPlaces.Store(p)
	if !p.take(ctx, 0) {
		t.Fatal("the only place was not free")
	}
	if p.crowded() != nil {
		t.Fatal("crowded with nobody waiting")
	}
	yielded := func() <-chan struct{} {
		done := make(chan struct{})
		go func() { s.yieldToHandshakes(ctx, nil); close(done) }()
		return done
	}
	waitCrowd := func() {
		for deadline := time.Now().Add(10 * time.Second); p.crowded() == nil; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a waiter in line, and no crowd")
			}
		}
	}
	expect := func(done <-chan struct{}, what string) {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the write still waits after %s", what)
		}
	}

	// Served: the crowd passes when the waiter gets the place.
	served := make(chan bool, 1)
	go func() { served <- p.take(ctx, time.Minute) }()
	waitCrowd()
	done := yielded()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the write did not wait for the handshake in line")
	default:
	}
	p.release()
	if !<-served {
		t.Fatal("the waiter was not given the freed place")
	}
	expect(done, "the last waiter was served")
	if p.crowded() != nil {
		t.Fatal("still crowded with nobody waiting")
	}

	// Given up: the crowd passes too.
	go func() { served <- p.take(ctx, 100*time.Millisecond) }()
	waitCrowd()
	done = yielded()
	if <-served {
		t.Fatal("a place was given while none was free")
	}
	expect(done, "the last waiter gave up")

	// Nobody waiting: no wait at all.
	expect(yielded(), "nobody waited")
}

// While connections queue for a handshake the collector's target is
// raised, and put back once the queue is gone.
func TestCollectorRelaxesInCrowds(t *testing.T) {
	old := debug.SetGCPercent(25)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	gogc := func() int64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	waitGOGC := func(want int64, when string) {
		for deadline := time.Now().Add(10 * time.Second); gogc() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC %d, want %d", when, gogc(), want)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newNewestFirst(1)
	if !p.take(ctx, 0) {
		t.Fatal("the only place was not free")
	}
	go relaxGCInCrowds(ctx, p, 100)
	time.Sleep(3 * crowdCheckInterval)
	if got := gogc(); got != 25 {
		t.Fatalf("GOGC %d with nobody waiting, want 25", got)
	}
	served := make(chan bool, 1)
	go func() { served <- p.take(ctx, time.Minute) }()
	waitGOGC(100, "a connection waiting")
	p.release()
	<-served
	waitGOGC(25, "the queue gone")
}
