package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent/linkprobe"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// fakeProbe stands in for the kernel's counters, which this test cannot
// drive to order (linkprobe's own tests drive the real ones).
type fakeProbe struct {
	mu sync.Mutex
	c  linkprobe.Counters
	// perRead is added at each Read: a steady rate.
	perRead linkprobe.Counters
}

func (f *fakeProbe) Read() (linkprobe.Counters, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c.Retransmits += f.perRead.Retransmits
	f.c.RetransmitsToHub += f.perRead.RetransmitsToHub
	f.c.Drops += f.perRead.Drops
	return f.c, nil
}

func (f *fakeProbe) rate(c linkprobe.Counters) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.perRead = c
}

// Link health flows from the agent's probe to EdgeHost status and the
// LinkDegraded condition; reports that change only the figures cost no
// write, a changed verdict is written at once (with an event), and held
// figures are written with the lastSeen refresh.
func TestLinkHealth(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, lastSeen: 6 * time.Second})
	tok := newToken(t, ns, enrolltoken.Options{})
	// Windows this short count as a second each (windowSeconds is whole
	// seconds), so a healthy link here resends nothing to the hub.
	probe := &fakeProbe{perRead: linkprobe.Counters{Retransmits: 3, Drops: 2}}
	e := newEdge(t, "linky", h.url, h.srv.CA().Pin(), tok)
	e.cfg.LinkInterval = 300 * time.Millisecond
	e.link = probe
	e.start()
	// An agent where BPF is denied reports why and still measures the
	// round trip.
	denied := newEdge(t, "nobpf", h.url, h.srv.CA().Pin(), tok)
	denied.cfg.LinkInterval = 300 * time.Millisecond
	denied.noLink = "probe unavailable: checking capabilities: needs CAP_BPF and CAP_PERFMON"
	denied.start()
	eventually(t, "the denied agent reports probe unavailable", func() error {
		host, err := getHost(ns, "nobpf")
		if err != nil {
			return err
		}
		l := host.Status.Link
		if l == nil || l.Probe != infrav1.LinkProbeUnavailable || l.Message != denied.noLink || l.HubRTTMilliseconds == nil {
			return fmt.Errorf("status.link %+v", l)
		}
		c := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition)
		if c == nil || c.Status != "False" || !strings.Contains(c.Message, "retransmissions not measured: probe unavailable") {
			return fmt.Errorf("LinkDegraded %+v", c)
		}
		return nil
	})

	eventually(t, "link health reported and judged healthy", func() error {
		host, err := getHost(ns, "linky")
		if err != nil {
			return err
		}
		l := host.Status.Link
		if l == nil {
			return errors.New("no status.link")
		}
		if l.Probe != infrav1.LinkProbeRunning || l.TCPRetransmits != 3 || l.TCPRetransmitsToHub != 0 || l.PacketDrops != 2 || l.HubRTTMilliseconds == nil {
			return fmt.Errorf("status.link %+v", *l)
		}
		if c := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition); c == nil || c.Status != "False" {
			return fmt.Errorf("LinkDegraded %+v", c)
		}
		return nil
	})

	// Reports every 300 ms with the same verdict cost no write: the held
	// figures reach the API with the lastSeen refresh (every 6 s here).
	// Right after one refresh, 3 s hold no write to this host's status.
	first, err := getHost(ns, "linky")
	must(t, err)
	eventually(t, "held link figures written with lastSeen", func() error {
		host, err := getHost(ns, "linky")
		if err != nil {
			return err
		}
		if !host.Status.Link.ObservedTime.After(first.Status.Link.ObservedTime.Time) {
			return fmt.Errorf("status.link still observed at %s", host.Status.Link.ObservedTime)
		}
		return nil
	})
	before := h.writes.to("/edgehosts/linky")
	time.Sleep(3 * time.Second)
	if d := h.writes.to("/edgehosts/linky") - before; d != 0 {
		t.Errorf("%d API writes to EdgeHost linky for ~10 healthy link reports in 3 s after a refresh, want 0", d)
	}

	// 10 retransmissions to the hub per window is 600 a minute: degraded,
	// written at once, with a Warning event.
	probe.rate(linkprobe.Counters{Retransmits: 40, RetransmitsToHub: 10})
	eventually(t, "LinkDegraded True", func() error {
		host, err := getHost(ns, "linky")
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition)
		if c == nil || c.Status != "True" || c.Reason != infrav1.LinkDegradedReason {
			return fmt.Errorf("LinkDegraded %+v", c)
		}
		return nil
	})
	eventually(t, "a LinkDegraded event", func() error {
		events := &corev1.EventList{}
		if err := env.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, ev := range events.Items {
			if ev.Reason == infrav1.LinkDegradedReason && ev.InvolvedObject.Name == "linky" && ev.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no event yet")
	})
	// And back.
	probe.rate(linkprobe.Counters{})
	eventually(t, "LinkDegraded False again", func() error {
		host, err := getHost(ns, "linky")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition); c == nil || c.Status != "False" {
			return fmt.Errorf("LinkDegraded %+v", c)
		}
		return nil
	})
}

// A host going away and coming back costs one status write each way: the
// gateway writes the LinkDegraded verdict together with AgentConnected, so
// the EdgeHost reconciler finds nothing left to patch. A second write per
// host nearly doubled the API server's work at a 10,000-agent cold start.
func TestAConnectivityChangeIsOneWrite(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, lastSeen: lastSeenForIdleTest})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "flappy", h.url, h.srv.CA().Pin(), tok).start()
	settled := func(what string, connected metav1.ConditionStatus, linkMessage string) {
		t.Helper()
		eventually(t, what, func() error {
			host, err := getHost(ns, "flappy")
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentConnectedCondition); c == nil || c.Status != connected {
				return fmt.Errorf("AgentConnected %+v", c)
			}
			if c := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition); c == nil || c.Status != metav1.ConditionUnknown || c.Message != linkMessage {
				return fmt.Errorf("LinkDegraded %+v", c)
			}
			return nil
		})
		// The reconciler answers a change within milliseconds here.
		time.Sleep(time.Second)
	}
	const notReported, disconnected = "The agent has not reported link health yet", "The agent is disconnected"
	settled("connected", metav1.ConditionTrue, notReported)

	before := h.writes.to("/edgehosts/flappy")
	e.stop()
	settled("recorded disconnected", metav1.ConditionFalse, disconnected)
	if d := h.writes.to("/edgehosts/flappy") - before; d != 1 {
		t.Errorf("the disconnect cost %d writes to EdgeHost flappy, want 1", d)
	}

	before = h.writes.to("/edgehosts/flappy")
	e.start()
	settled("recorded connected again", metav1.ConditionTrue, notReported)
	if d := h.writes.to("/edgehosts/flappy") - before; d != 1 {
		t.Errorf("the reconnect cost %d writes to EdgeHost flappy, want 1", d)
	}
}
