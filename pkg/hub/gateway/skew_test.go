package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/version"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
)

// next reads the hub's next frame: its envelope and its message.
func (c *rawClient) next(t *testing.T) (wire.Envelope, any) {
	t.Helper()
	_ = c.ctrl.SetReadDeadline(time.Now().Add(10 * time.Second))
	frame, err := wire.ReadFrame(c.ctrl, wire.MaxFrameSize)
	must(t, err)
	var env wire.Envelope
	must(t, json.Unmarshal(frame, &env))
	msg, _, err := wire.DecodeVersion(frame)
	must(t, err)
	return env, msg
}

// A hub serves agents of every protocol version it speaks, each in the
// highest version both speak: an agent that predates negotiation gets
// version 1 and no Welcome (it would not know one), a current agent
// version 2 and a Welcome.
func TestVersionSkew(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "current", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "the current agent connected", func() error {
		if p := h.srv.SessionProtocol(ns, "current"); p != wire.MaxProtocol {
			return fmt.Errorf("its session speaks v%d, want v%d", p, wire.MaxProtocol)
		}
		return nil
	})
	pair, caPEM := credentials(t, e)
	e.stop()

	t.Run("an agent of version 1", func(t *testing.T) {
		c, _, err := dialRaw(t, h.url, caPEM, &pair)
		must(t, err)
		c.send(t, &wire.Hello{AgentVersion: "v0.1.0", Host: "current"})
		env, msg := c.next(t)
		if _, ok := msg.(*wire.DesiredState); !ok || env.Protocol != wire.ProtocolName(1) {
			t.Fatalf("first frame %s in %s, want a DesiredState in %s", env.Type, env.Protocol, wire.ProtocolName(1))
		}
		// Its reports are taken as ever.
		c.send(t, &wire.Status{Facts: infrav1.HostFacts{Hostname: "current", AgentVersion: "v0.1.0"}})
		eventually(t, "the old agent's facts recorded", func() error {
			host, err := getHost(ns, "current")
			if err != nil || host.Status.Facts.AgentVersion != "v0.1.0" {
				return fmt.Errorf("agentVersion %q %v", host.Status.Facts.AgentVersion, err)
			}
			return nil
		})
	})
	t.Run("an agent of versions 1 and 2", func(t *testing.T) {
		c, _, err := dialRaw(t, h.url, caPEM, &pair)
		must(t, err)
		c.send(t, &wire.Hello{AgentVersion: "v0.2.0", Host: "current", Protocols: &wire.ProtocolRange{Min: 1, Max: 2}})
		env, msg := c.next(t)
		w, ok := msg.(*wire.Welcome)
		if !ok || env.Protocol != wire.ProtocolName(2) || w.HubVersion != version.Version {
			t.Fatalf("first frame %s in %s (%+v), want a Welcome in %s from hub %s", env.Type, env.Protocol, msg, wire.ProtocolName(2), version.Version)
		}
		if env, _ := c.next(t); env.Type != wire.TypeDesiredState || env.Protocol != wire.ProtocolName(2) {
			t.Fatalf("second frame %s in %s, want a DesiredState in v2", env.Type, env.Protocol)
		}
	})
	t.Run("an agent newer than the hub", func(t *testing.T) {
		c, _, err := dialRaw(t, h.url, caPEM, &pair)
		must(t, err)
		future := wire.MaxProtocol + 3
		c.send(t, &wire.Hello{AgentVersion: "v9.0.0", Host: "current", Protocols: &wire.ProtocolRange{Min: future - 1, Max: future}})
		env, msg := c.next(t)
		refusal, ok := msg.(*wire.Error)
		if !ok || refusal.Code != wire.ErrUnsupportedProtocol || env.Protocol != wire.ProtocolName(future) ||
			!strings.Contains(refusal.Message, "fleet-agent v9.0.0 speaks protocol") || !strings.Contains(refusal.Message, "upgrade the hub first") {
			t.Fatalf("answer %s in %s: %+v; want an UnsupportedProtocol error in the agent's version saying to upgrade the hub", env.Type, env.Protocol, msg)
		}
		expectUnsupported(t, ns, "current", infrav1.AgentTooNewReason, "upgrade the hub first")
		// Refused again, nothing has changed: no write.
		skipped := metricValue(t, "fleet_gateway_status_writes_skipped_total", map[string]string{"cause": "unsupported"})
		c2, _, err := dialRaw(t, h.url, caPEM, &pair)
		must(t, err)
		c2.send(t, &wire.Hello{AgentVersion: "v9.0.0", Host: "current", Protocols: &wire.ProtocolRange{Min: future - 1, Max: future}})
		c2.expectError(t, wire.ErrUnsupportedProtocol)
		eventually(t, "the second refusal skipped its write", func() error {
			if got := metricValue(t, "fleet_gateway_status_writes_skipped_total", map[string]string{"cause": "unsupported"}); got != skipped+1 {
				return fmt.Errorf("skipped writes %v, want %v", got, skipped+1)
			}
			return nil
		})
		// An agent the hub serves clears the condition.
		e.start()
		expectSupported(t, ns, "current")
	})
}

// A hub that no longer serves version 1 (--min-agent-protocol 2) refuses
// an agent that speaks nothing newer and says to upgrade it; a current
// agent on the same host is served and the condition turns False.
func TestAMinimumProtocolRefusesOlderAgents(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns, minAgentProtocol: 2})
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "aged", h.url, h.srv.CA().Pin(), tok).start()
	eventually(t, "the current agent connected in v2", func() error {
		if p := h.srv.SessionProtocol(ns, "aged"); p != 2 {
			return fmt.Errorf("its session speaks v%d", p)
		}
		return nil
	})
	pair, caPEM := credentials(t, e)
	e.stop()

	c, _, err := dialRaw(t, h.url, caPEM, &pair)
	must(t, err)
	c.send(t, &wire.Hello{AgentVersion: "v0.1.0", Host: "aged"})
	env, msg := c.next(t)
	refusal, ok := msg.(*wire.Error)
	if !ok || refusal.Code != wire.ErrUnsupportedProtocol || env.Protocol != wire.ProtocolName(1) ||
		!strings.Contains(refusal.Message, "upgrade fleet-agent on this host") {
		t.Fatalf("answer %s in %s: %+v; want an UnsupportedProtocol error in v1 saying to upgrade the agent", env.Type, env.Protocol, msg)
	}
	expectUnsupported(t, ns, "aged", infrav1.AgentTooOldReason, "this hub (fleet-hub "+version.Version+") serves v2")
	e.start()
	expectSupported(t, ns, "aged")
}

// expectUnsupported waits for the host's AgentVersionUnsupported True with
// reason and a message holding text, and for the Warning event.
func expectUnsupported(t *testing.T, ns, name, reason, text string) {
	t.Helper()
	eventually(t, "AgentVersionUnsupported "+reason, func() error {
		host, err := getHost(ns, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentVersionUnsupportedCondition)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != reason || !strings.Contains(c.Message, text) {
			return fmt.Errorf("AgentVersionUnsupported %+v", c)
		}
		return nil
	})
	eventually(t, "a "+reason+" event", func() error {
		events := &corev1.EventList{}
		if err := env.Client.List(context.Background(), events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, ev := range events.Items {
			if ev.Reason == reason && ev.InvolvedObject.Name == name && ev.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return errors.New("no event yet")
	})
}

func expectSupported(t *testing.T, ns, name string) {
	t.Helper()
	eventually(t, "AgentVersionUnsupported False once the agent is served", func() error {
		host, err := getHost(ns, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentVersionUnsupportedCondition)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != infrav1.AgentVersionSupportedReason {
			return fmt.Errorf("AgentVersionUnsupported %+v", c)
		}
		return nil
	})
}
