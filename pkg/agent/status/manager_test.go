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

// The end of a bootstrap goes out without waiting out the pause between
// reports: the hub, and Cluster API behind it, wait on that news. Step
// changes still wait (here, for an hour).
func TestTheEndOfABootstrapIsNotHeldBack(t *testing.T) {
	m := New()
	m.pause = time.Hour
	sent := make(chan *wire.Status, 10)
	m.Attach(func(st *wire.Status) error { sent <- st; return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	state := func(s infrav1.ProvisioningState, step string) *wire.Status {
		return &wire.Status{Provisioning: &infrav1.HostProvisioningStatus{ClaimUID: "c", State: s, Step: step}}
	}
	next := func() *wire.Status {
		select {
		case st := <-sent:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("no report: the end of the bootstrap waited for the pause")
			return nil
		}
	}
	m.Set(state(infrav1.ProvisioningRunning, "runcmd 1/1"))
	if st := next(); st.Provisioning.State != infrav1.ProvisioningRunning {
		t.Fatalf("first report %+v", st.Provisioning)
	}
	m.Set(state(infrav1.ProvisioningRunning, "sentinel"))
	m.Set(state(infrav1.ProvisioningSucceeded, ""))
	if st := next(); st.Provisioning.State != infrav1.ProvisioningSucceeded {
		t.Fatalf("second report %+v, want the bootstrap's end", st.Provisioning)
	}
	m.Set(state(infrav1.ProvisioningResetting, ""))
	m.Set(&wire.Status{})
	if st := next(); st.Provisioning != nil {
		t.Fatalf("third report %+v, want the reset's end", st.Provisioning)
	}
}
