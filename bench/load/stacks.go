package load

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// WaitClass names what a goroutine is doing when its stack holds one of
// Frames (a substring of a function line), checked in order.
type WaitClass struct {
	Name   string
	Frames []string
}

// StackSampler is wall-clock profiling of one kind of goroutine: every
// period it reads this process's goroutine stacks, picks those that hold
// Goroutine, and counts what each is doing. A CPU profile cannot say
// where a goroutine that mostly waits spends its time; this can.
type StackSampler struct {
	// Goroutine is a substring of a function line that marks the
	// goroutines sampled.
	Goroutine string
	// Classes are tried in order; a stack that matches none is counted
	// as "running" when its state says so and by its state otherwise.
	Classes []WaitClass

	mu      sync.Mutex
	counts  map[string]int
	samples int
	absent  int
}

// Run samples every period until ctx ends.
func (s *StackSampler) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var buf bytes.Buffer
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		buf.Reset()
		if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
			continue
		}
		s.Add(buf.String())
	}
}

// Add counts one dump in runtime/pprof's debug=2 format.
func (s *StackSampler) Add(dump string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.samples++
	found := false
	for _, g := range strings.Split(dump, "\n\n") {
		if !strings.Contains(g, s.Goroutine) {
			continue
		}
		found = true
		s.counts[s.classify(g)]++
	}
	if !found {
		s.absent++
	}
}

func (s *StackSampler) classify(g string) string {
	for _, c := range s.Classes {
		for _, f := range c.Frames {
			if strings.Contains(g, f) {
				return c.Name
			}
		}
	}
	// "goroutine 7 [select, 2 minutes]:"
	state := "unknown"
	if i, j := strings.IndexByte(g, '['), strings.IndexByte(g, ']'); i >= 0 && j > i {
		state = strings.SplitN(g[i+1:j], ",", 2)[0]
	}
	if state == "running" || state == "runnable" {
		return "on CPU or waiting for one"
	}
	return "other wait (" + state + ")"
}

// Result is how many samples found each class, how many samples were
// taken, and how many found no such goroutine.
func (s *StackSampler) Result() (counts map[string]int, samples, absent int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out, s.samples, s.absent
}
