package admission

import (
	"context"
	"testing"
	"time"
)

// Once connections have queued for a handshake place and nobody has
// waited for crowdCalm, the hub returns its free memory: once a wave,
// however long the wave, and never without one. The wave is on from the
// first connection queued to its end.
func TestWavesFollowed(t *testing.T) {
	defer func(c time.Duration) { crowdCalm = c }(crowdCalm)
	crowdCalm = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newNewestFirst(1)
	if !p.take(ctx, "", 0) {
		t.Fatal("the only place was not free")
	}
	freed := make(chan struct{}, 4)
	done := make(chan struct{})
	w := NewWaves()
	go func() { followWaves(ctx, p, w, func() { freed <- struct{}{} }); close(done) }()
	expectOn := func(want bool, when string) {
		t.Helper()
		if w.On() != want {
			t.Fatalf("wave on = %v %s, want %v", !want, when, want)
		}
	}
	expectFreed := func(want bool, within time.Duration, when string) {
		t.Helper()
		select {
		case <-freed:
			if !want {
				t.Fatalf("memory returned %s", when)
			}
		case <-time.After(within):
			if want {
				t.Fatalf("memory not returned %s", when)
			}
		}
	}
	expectFreed(false, 3*crowdCheckInterval, "with nobody waiting")
	expectOn(false, "with nobody waiting")

	for wave := range 2 {
		served := make(chan bool, 1)
		go func() { served <- p.take(ctx, "", time.Minute) }()
		expectFreed(false, 2*crowdCalm, "while a connection waits")
		expectOn(true, "while a connection waits")
		p.release("")
		if !<-served {
			t.Fatalf("wave %d: the waiter was not given the freed place", wave)
		}
		expectOn(true, "just after the line emptied")
		expectFreed(true, 10*time.Second, "after the wave")
		expectOn(false, "after the wave")
		// The served waiter holds the only place: the next waits too.
	}
	// A waiter that gives up ends a wave too.
	if p.take(ctx, "", 50*time.Millisecond) {
		t.Fatal("a place was given while none was free")
	}
	expectFreed(true, 10*time.Second, "after a wave whose last waiter gave up")
	expectFreed(false, 3*crowdCheckInterval, "with no new wave")

	// A hub that stops in a wave stops waiting for its end.
	go p.take(ctx, "", time.Minute)
	for deadline := time.Now().Add(10 * time.Second); p.waiters() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never got in line")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); !w.On(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no wave with a connection in line")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting for the wave's end after the hub stopped")
	}
	expectFreed(false, 0, "after the hub stopped")
	expectOn(false, "after the hub stopped: nothing may wait for it")
}

// outlast returns at once without a wave, when the wave ends, or when its
// time is up, and tells whether it waited.
func TestOutlastWaves(t *testing.T) {
	ctx := context.Background()
	w := NewWaves()
	if w.Outlast(ctx, time.Hour) {
		t.Fatal("waited with no wave on")
	}
	w.Begin()
	w.Begin() // a wave already on stays one wave
	returned := make(chan bool, 1)
	go func() { returned <- w.Outlast(ctx, time.Hour) }()
	select {
	case <-returned:
		t.Fatal("returned while the wave was on")
	case <-time.After(100 * time.Millisecond):
	}
	w.End()
	select {
	case waited := <-returned:
		if !waited {
			t.Fatal("said it did not wait for the wave")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting after the wave ended")
	}
	w.End() // ending twice is harmless
	w.Begin()
	start := time.Now()
	if !w.Outlast(ctx, 50*time.Millisecond) || time.Since(start) < 50*time.Millisecond {
		t.Fatal("did not wait out its time in an endless wave")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if !w.Outlast(cctx, time.Hour) {
		t.Fatal("an ended context: said it did not wait")
	}
}
