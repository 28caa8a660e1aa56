package load

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strconv"
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
	// Classes are tried in order; a stack that matches none counts as
	// elsewhere.
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
		// debug=1 (stacks counted, not each goroutine printed): printing
		// every goroutine of a process running hundreds of agents costs
		// seconds of CPU per minute, and would be charged to what is
		// measured.
		if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
			continue
		}
		s.Add(buf.String())
	}
}

// Add counts one goroutine profile in runtime/pprof's debug=1 format:
// blank-line separated stacks, each opening with "N @ pcs".
func (s *StackSampler) Add(dump string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.samples++
	if strings.HasPrefix(dump, "goroutine profile:") {
		// The header line ("goroutine profile: total N") sits on top
		// of the first stack.
		_, dump, _ = strings.Cut(dump, "\n")
	}
	found := false
	for _, g := range strings.Split(dump, "\n\n") {
		if !strings.Contains(g, s.Goroutine) {
			continue
		}
		n := 1
		if f := strings.Fields(g); len(f) > 1 && f[1] == "@" {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 0 {
				n = v
			}
		}
		found = true
		s.counts[s.classify(g)] += n
	}
	if !found {
		s.absent++
	}
}

// elsewhere is the class of a stack that matches none: runtime frames
// (where a goroutine parks) are not in a debug=1 profile, so a stack does
// not say whether it is running or waiting on something unnamed.
const elsewhere = "elsewhere (computing, or a wait not named above)"

func (s *StackSampler) classify(g string) string {
	for _, c := range s.Classes {
		for _, f := range c.Frames {
			if strings.Contains(g, f) {
				return c.Name
			}
		}
	}
	return elsewhere
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
