package status

import (
	"context"
	"sync"
	"testing"
	"time"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// The steps of a short bootstrap, reported in quick succession, reach the
// hub as few reports (each can be an API write there), the last one always
// among them; a resend during the pause is not lost.
func TestStatusReportsAreCoalesced(t *testing.T) {
	m := New()
	var mu sync.Mutex
	var sent []string
	m.Attach(func(st *wire.Status) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, st.Facts.Hostname)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	for _, step := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "last"} {
		m.Set(&wire.Status{Facts: infrav1.HostFacts{Hostname: step}})
		time.Sleep(10 * time.Millisecond) // steps a moment apart, well inside one pause
	}
	reports := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), sent...)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(reports()) == 0 || reports()[len(reports())-1] != "last" {
		if time.Now().After(deadline) {
			t.Fatalf("the last status never went out: %v", reports())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := reports(); len(got) > 3 {
		t.Errorf("10 changes in a burst made %d reports %v, want them coalesced (at most 3)", len(got), got)
	}
	// A resend (the resync timer) goes out even though nothing changed.
	n := len(reports())
	m.Resend()
	for len(reports()) == n {
		if time.Now().After(deadline) {
			t.Fatal("a resend was swallowed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
