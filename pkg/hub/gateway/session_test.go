package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent/linkprobe"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// Assigning a host sends its agent the desired state with the bootstrap
// data; a release makes it reset; a new claim (a newer generation) arrives.
// The same with the hub running either end of the yamux protocol
// (--session-mux): its own, or hashicorp/yamux's kept as a fallback.
func TestDesiredStateFlow(t *testing.T) {
	for _, kind := range hubmux.Kinds() {
		t.Run(kind, func(t *testing.T) { testDesiredStateFlow(t, kind) })
	}
}

func testDesiredStateFlow(t *testing.T, mux string) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, mux: mux})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "kiosk", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "connected", func() error {
		if s, err := connectedStatus(ns, "kiosk"); err != nil || s != "True" {
			return fmt.Errorf("%s %v", s, err)
		}
		return nil
	})

	bootstrapSecret(t, ns, "boot-1", "#cloud-config\nruncmd: [one]\n")
	uid1 := claim(t, ns, "kiosk", "m1", "boot-1")
	eventually(t, "assignment applied and reported", func() error {
		p := e.rec.Provisions()
		if len(p) != 1 || string(p[0].BootstrapData) != "#cloud-config\nruncmd: [one]\n" || p[0].ClaimUID != uid1 {
			return fmt.Errorf("provisions %+v", p)
		}
		host, err := getHost(ns, "kiosk")
		if err != nil {
			return err
		}
		if host.Status.Phase != infrav1.HostProvisioned || host.Status.ProviderID != inventory.ProviderID(host) ||
			host.Status.AgentObservedGeneration != host.Generation {
			return fmt.Errorf("phase %s providerID %q observed %d gen %d", host.Status.Phase, host.Status.ProviderID,
				host.Status.AgentObservedGeneration, host.Generation)
		}
		return nil
	})

	release(t, ns, "kiosk")
	eventually(t, "reset and Available", func() error {
		if r := e.rec.Resets(); len(r) != 1 || r[0] != uid1 {
			return fmt.Errorf("resets %v", r)
		}
		host, err := getHost(ns, "kiosk")
		if err != nil {
			return err
		}
		if host.Status.Phase != infrav1.HostAvailable {
			return fmt.Errorf("phase %s", host.Status.Phase)
		}
		return nil
	})

	bootstrapSecret(t, ns, "boot-2", "#cloud-config\nruncmd: [two]\n")
	uid2 := claim(t, ns, "kiosk", "m2", "boot-2")
	eventually(t, "second assignment", func() error {
		p := e.rec.Provisions()
		if len(p) != 2 || p[1].ClaimUID != uid2 || string(p[1].BootstrapData) != "#cloud-config\nruncmd: [two]\n" {
			return fmt.Errorf("provisions %+v", p)
		}
		return nil
	})
	// The recorder sees the bootstrap before the worker records its
	// generation.
	eventually(t, "generation recorded", func() error {
		if g := e.agent.Applied().Generation; g < 4 {
			return fmt.Errorf("applied generation %d after claim, release, claim", g)
		}
		return nil
	})
}

// The hub restarts under connected agents: they reconnect and resync, the
// desired state is delivered again and recognised as applied, and the
// EdgeHost shows disconnected, then connected, by the hub's clock.
func TestHubRestart(t *testing.T) {
	ns := newNamespace(t)
	addr := freeAddr(t)
	h := startHub(t, hubOptions{ns: ns, addr: addr})
	pin := h.srv.CA().Pin()
	tok := newToken(t, ns, enrolltoken.Options{})
	var edges []*edge
	for i := range 3 {
		edges = append(edges, newEdge(t, fmt.Sprintf("till-%d", i), h.url, pin, tok).start())
	}
	bootstrapSecret(t, ns, "boot", "#cloud-config\n")
	eventually(t, "all enrolled", func() error {
		hosts := &infrav1.EdgeHostList{}
		if err := env.Client.List(context.Background(), hosts, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(hosts.Items) != 3 {
			return fmt.Errorf("%d hosts", len(hosts.Items))
		}
		return nil
	})
	claim(t, ns, "till-0", "m0", "boot")
	eventually(t, "till-0 provisioned", func() error {
		if len(edges[0].rec.Provisions()) != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	// The desired state is pushed before the connection is recorded, so
	// provisioning can finish first: wait for the record, which is what
	// the stop below must leave alone.
	eventually(t, "all recorded connected", func() error {
		for i := range edges {
			if s, err := connectedStatus(ns, fmt.Sprintf("till-%d", i)); err != nil || s != "True" {
				return fmt.Errorf("till-%d AgentConnected %s %v", i, s, err)
			}
		}
		return nil
	})

	// Cut: the hub goes away for a while. A stopping hub records no
	// session ends (its agents come back to the next replica; the EdgeHost
	// reconciler marks hosts whose lastSeenTime stops moving).
	h.stop()
	time.Sleep(time.Second) // agents keep retrying meanwhile
	for i := range edges {
		if s, err := connectedStatus(ns, fmt.Sprintf("till-%d", i)); err != nil || s != "True" {
			t.Errorf("till-%d AgentConnected %s %v after the hub stopped, want it left True", i, s, err)
		}
	}

	h2 := startHub(t, hubOptions{ns: ns, addr: addr})
	if h2.srv.CA().Pin() != pin {
		t.Fatal("the restarted hub has a different CA: it must come from the Secret")
	}
	eventually(t, "all reconnected and connected", func() error {
		for i, e := range edges {
			if !e.agent.Connected() || e.agent.Sessions() < 2 {
				return fmt.Errorf("till-%d connected %v sessions %d", i, e.agent.Connected(), e.agent.Sessions())
			}
			if s, err := connectedStatus(ns, fmt.Sprintf("till-%d", i)); err != nil || s != "True" {
				return fmt.Errorf("till-%d AgentConnected %s %v", i, s, err)
			}
		}
		return nil
	})
	// Give the resent desired state time to arrive, then check it was
	// recognised as applied rather than run again.
	time.Sleep(time.Second)
	if n := len(edges[0].rec.Provisions()); n != 1 {
		t.Errorf("till-0 provisioned %d times across the restart, want 1", n)
	}
	host, err := getHost(ns, "till-0")
	must(t, err)
	if host.Status.Phase != infrav1.HostProvisioned {
		t.Errorf("till-0 phase %s after restart", host.Status.Phase)
	}
}

// lastSeenForIdleTest is the production default; set it to a second to see
// this test catch the lastSeen writes.
var lastSeenForIdleTest = 5 * time.Minute

// In steady state (connected, nothing changing, agents re-sending status
// every 200 ms) the hub makes no API writes.
func TestNoWritesForIdleAgents(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, lastSeen: lastSeenForIdleTest})
	tok := newToken(t, ns, enrolltoken.Options{})
	for i := range 4 {
		// With link health on, as shipped: a report every 300 ms here.
		e := newEdge(t, fmt.Sprintf("idle-%d", i), h.url, h.srv.CA().Pin(), tok)
		e.cfg.LinkInterval = 300 * time.Millisecond
		e.link = &fakeProbe{perRead: linkprobe.Counters{Retransmits: 2, Drops: 1}}
		e.start()
	}
	eventually(t, "all connected and reported", func() error {
		for i := range 4 {
			host, err := getHost(ns, fmt.Sprintf("idle-%d", i))
			if err != nil {
				return err
			}
			if host.Status.Phase != infrav1.HostAvailable || host.Status.AgentObservedGeneration == 0 && host.Generation > 1 {
				return fmt.Errorf("idle-%d phase %q", i, host.Status.Phase)
			}
			if s, err := connectedStatus(ns, host.Name); err != nil || s != "True" {
				return fmt.Errorf("idle-%d AgentConnected %s %v", i, s, err)
			}
			if host.Status.Link == nil {
				return fmt.Errorf("idle-%d has reported no link health yet", i)
			}
		}
		return nil
	})
	// Let the first round of reports and reconciles settle.
	time.Sleep(2 * time.Second)
	before := len(h.writes.since(0))
	time.Sleep(3 * time.Second)
	if w := h.writes.since(before); len(w) != 0 {
		t.Errorf("the hub made %d API writes in 3 s of idle agents (~40 link reports), want 0: %v", len(w), w)
	}
}

// lastSeenTime is refreshed every interval while a host stays connected:
// it is how a fleet's liveness shows without an API write per heartbeat,
// and a reconnect's skipped write must not skip refreshes too.
func TestLastSeenIsRefreshedEveryInterval(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, lastSeen: time.Second})
	tok := newToken(t, ns, enrolltoken.Options{})
	last := map[string]string{"cause": "last_seen"}
	written, skipped := metricValue(t, "fleet_gateway_status_writes_total", last), metricValue(t, "fleet_gateway_status_writes_skipped_total", last)
	newEdge(t, "pulse", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "three refreshes written", func() error {
		if n := metricValue(t, "fleet_gateway_status_writes_total", last) - written; n < 3 {
			return fmt.Errorf("%v lastSeenTime refreshes written", n)
		}
		return nil
	})
	if n := metricValue(t, "fleet_gateway_status_writes_skipped_total", last) - skipped; n != 0 {
		t.Errorf("%v lastSeenTime refreshes skipped, want none", n)
	}
}

// A replica that stops records no session ends; once it is back, the hosts
// it last recorded as connected whose agents did not return within the
// return grace (an agent that died while the hub was down) are recorded
// disconnected, and the ones that came back stay connected.
func TestAnAgentThatDoesNotComeBackAfterARestartIsMarked(t *testing.T) {
	ns := newNamespace(t)
	addr := freeAddr(t)
	h := startHub(t, hubOptions{ns: ns, addr: addr})
	pin := h.srv.CA().Pin()
	tok := newToken(t, ns, enrolltoken.Options{})
	back := newEdge(t, "back", h.url, pin, tok).start()
	gone := newEdge(t, "gone", h.url, pin, tok).start()
	for _, name := range []string{"back", "gone"} {
		eventually(t, name+" connected", func() error {
			if s, err := connectedStatus(ns, name); err != nil || s != "True" {
				return fmt.Errorf("AgentConnected %s %v", s, err)
			}
			return nil
		})
	}

	h.stop()
	gone.stop() // dies while the hub is down
	startHub(t, hubOptions{ns: ns, addr: addr, returnGrace: 3 * time.Second})
	eventually(t, "the agent that died recorded disconnected", func() error {
		if s, err := connectedStatus(ns, "gone"); err != nil || s != "False" {
			return fmt.Errorf("gone: AgentConnected %s %v", s, err)
		}
		return nil
	})
	eventually(t, "the agent that came back connected", func() error {
		if !back.agent.Connected() || back.agent.Sessions() < 2 {
			return fmt.Errorf("back: connected %v sessions %d", back.agent.Connected(), back.agent.Sessions())
		}
		if s, err := connectedStatus(ns, "back"); err != nil || s != "True" {
			return fmt.Errorf("back: AgentConnected %s %v", s, err)
		}
		return nil
	})
}

// After an outage the whole fleet comes back at once; its sessions record
// themselves a few at a time, not all together (each write in flight
// costs the API server, and beyond an HTTP/2 connection's streams a new
// connection), and every host still reads connected in the end.
func TestStatusWritesAreBounded(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, statusWrites: 2, slowStatus: 100 * time.Millisecond})
	tok := newToken(t, ns, enrolltoken.Options{})
	const n = 10
	edges := make([]*edge, n)
	for i := range edges {
		edges[i] = newEdge(t, fmt.Sprintf("crowd-%d", i), h.url, h.srv.CA().Pin(), tok)
		must(t, agentEnroll(edges[i]))
	}
	for _, e := range edges {
		e.start()
	}
	for i := range edges {
		eventually(t, "every host recorded connected", func() error {
			if s, err := connectedStatus(ns, fmt.Sprintf("crowd-%d", i)); err != nil || s != metav1.ConditionTrue {
				return fmt.Errorf("crowd-%d: AgentConnected %s %v", i, s, err)
			}
			return nil
		})
	}
	if m := h.writes.maxStatusInFlight.Load(); m > 2 || m < 1 {
		t.Errorf("%d status writes were in flight at once; the limit is 2", m)
	}
}
