package admission

import (
	"context"
	"testing"
	"time"
)

// A freed place goes to the newest waiter; a waiter that gave up takes
// none, and every place given back can be taken again.
func TestPlacesGoToTheNewestWaiter(t *testing.T) {
	p := newNewestFirst(1)
	ctx := context.Background()
	if !p.take(ctx, "", 0) {
		t.Fatal("the only place was not free")
	}
	if p.take(ctx, "", 0) {
		t.Fatal("a second place was given with a limit of 1")
	}
	// waiter queues one taker and returns a channel with its outcome once
	// it is in line.
	waiter := func(wait time.Duration) <-chan bool {
		got := make(chan bool, 1)
		p.mu.Lock()
		n := len(p.waiting)
		p.mu.Unlock()
		go func() { got <- p.take(ctx, "", wait) }()
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

	p.release("")
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
	p.release("")
	if !<-oldest {
		t.Fatal("the oldest waiter was not served by the next place")
	}
	p.release("")
	if got := p.inUse(); got != 0 {
		t.Errorf("%d places in use after all were given back, want 0", got)
	}
	if !p.take(ctx, "", 0) || p.take(ctx, "", 0) {
		t.Error("after the line emptied, want exactly one place free")
	}
}

// Waiters that give up are dropped from the line in bulk, so a line
// under lasting overload does not grow without bound.
func TestPlacesForgetWaitersThatGaveUp(t *testing.T) {
	p := newNewestFirst(1)
	ctx := context.Background()
	p.take(ctx, "", 0)
	done := make(chan bool)
	for range 500 {
		go func() { done <- p.take(ctx, "", time.Millisecond) }()
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
	p.release("")
	if p.inUse() != 0 {
		t.Error("the place given back was lost among the waiters that gave up")
	}
}

// One source holds at most its share of the places: its next taker waits
// while another source's is served, and is served once its own source
// gives a place back.
func TestPlacesPerSource(t *testing.T) {
	p := newNewestFirstPerSource(3, 2)
	ctx := context.Background()
	for range 2 {
		if !p.take(ctx, "a", 0) {
			t.Fatal("source a could not take its two places")
		}
	}
	if p.take(ctx, "a", 0) {
		t.Fatal("source a took a third place of three")
	}
	got := make(chan bool, 1)
	go func() { got <- p.take(ctx, "a", time.Minute) }()
	for deadline := time.Now().Add(10 * time.Second); p.waiters() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's third taker never got in line")
		}
	}
	if !p.take(ctx, "b", 0) {
		t.Fatal("source b found no place while a held its share")
	}
	p.release("b") // b's place goes back: a is still at its share
	select {
	case <-got:
		t.Fatal("a was given a place beyond its share")
	case <-time.After(50 * time.Millisecond):
	}
	p.release("a")
	if !<-got {
		t.Fatal("a's waiter was not served when a gave a place back")
	}
	if n := p.inUse(); n != 2 {
		t.Fatalf("%d places in use, want 2", n)
	}
}
