package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// fakeGC records the collector settings relaxGCInCrowds makes, in order,
// starting from a target of gogc.
type fakeGC struct {
	gogc   int
	events chan string
}

func newFakeGC(gogc int) *fakeGC { return &fakeGC{gogc: gogc, events: make(chan string, 16)} }

func (f *fakeGC) knobs() gcKnobs {
	return gcKnobs{
		setGCPercent: func(p int) int {
			prev := f.gogc
			f.gogc = p
			f.events <- fmt.Sprintf("gogc %d", p)
			return prev
		},
		freeOSMemory: func() { f.events <- "free" },
	}
}

func (f *fakeGC) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-f.events:
			if got != w {
				t.Fatalf("collector: %q, want %q", got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("collector: nothing after 10 s, want %q", w)
		}
	}
}

func (f *fakeGC) expectNothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-f.events:
		t.Fatalf("collector: %q, want nothing", got)
	case <-time.After(d):
	}
}

// While connections queue for a handshake place the collector's target
// is raised; once nobody has waited for crowdCalm the old one is put back
// and the wave's memory returned, and the next wave does the same.
func TestCollectorRelaxesInCrowds(t *testing.T) {
	defer func(c time.Duration) { crowdCalm = c }(crowdCalm)
	crowdCalm = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newNewestFirst(1)
	if !p.take(ctx, 0) {
		t.Fatal("the only place was not free")
	}
	gc := newFakeGC(25)
	go relaxGCInCrowds(ctx, p, 100, gc.knobs())
	gc.expectNothing(t, 3*crowdCheckInterval)

	for wave := range 2 {
		served := make(chan bool, 1)
		go func() { served <- p.take(ctx, time.Minute) }()
		gc.expect(t, "gogc 100")
		// Still a crowd while someone waits, however long.
		gc.expectNothing(t, 2*crowdCalm)
		p.release()
		if !<-served {
			t.Fatalf("wave %d: the waiter was not given the freed place", wave)
		}
		gc.expect(t, "gogc 25", "free")
		// The served waiter holds the only place: the next waits too.
	}
	gc.expectNothing(t, 3*crowdCheckInterval)
}

// A target already as high (or the collector off) is left alone, with no
// collection forced afterwards; an ending hub puts the target back.
func TestCollectorLeftAloneWhenAlreadyRelaxed(t *testing.T) {
	defer func(c time.Duration) { crowdCalm = c }(crowdCalm)
	crowdCalm = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newNewestFirst(1)
	p.take(ctx, 0)
	gc := newFakeGC(200)
	done := make(chan struct{})
	go func() { relaxGCInCrowds(ctx, p, 100, gc.knobs()); close(done) }()
	if p.take(ctx, 50*time.Millisecond) {
		t.Fatal("a place was given while none was free")
	}
	gc.expect(t, "gogc 100", "gogc 200")
	gc.expectNothing(t, 2*crowdCalm)

	gc.gogc = 25
	go p.take(ctx, time.Minute)
	gc.expect(t, "gogc 100")
	cancel()
	gc.expect(t, "gogc 25")
	<-done
	gc.expectNothing(t, 3*crowdCheckInterval)
}
