package session

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// hubEnd plays the hub's end of a control stream: it writes frames and
// reads what the agent writes back.
type hubEnd struct {
	t    *testing.T
	conn net.Conn
}

func (h hubEnd) write(v int, msg any) {
	h.t.Helper()
	b, err := wire.EncodeAs(v, msg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.writeFrame(b)
}

func (h hubEnd) writeFrame(b []byte) {
	h.t.Helper()
	if err := wire.WriteFrame(h.conn, b); err != nil {
		h.t.Fatal(err)
	}
}

// envelope reads the agent's next frame's envelope.
func (h hubEnd) envelope() wire.Envelope {
	h.t.Helper()
	_ = h.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := wire.ReadFrame(h.conn, wire.MaxFrameSize)
	if err != nil {
		h.t.Fatal(err)
	}
	var env wire.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		h.t.Fatal(err)
	}
	return env
}

// readSession runs the agent's reader on one end of a pipe; the test
// plays the hub on the other.
func readSession(t *testing.T) (hubEnd, *control, chan Update, chan error) {
	t.Helper()
	agentEnd, hub := net.Pipe()
	t.Cleanup(func() { _ = agentEnd.Close(); _ = hub.Close() })
	s := New(Options{Hub: "https://hub.example"}, state.Store{Dir: t.TempDir()}, logr.Discard())
	updates := make(chan Update, 8)
	s.updates = updates
	ctrl := &control{conn: agentEnd}
	ctrl.version.Store(wire.MinProtocol)
	done := make(chan error, 1)
	go func() { done <- s.read(context.Background(), ctrl, nil) }()
	return hubEnd{t: t, conn: hub}, ctrl, updates, done
}

func TestTheHubsFirstFrameFixesTheVersion(t *testing.T) {
	t.Run("a hub of version 1 sends no Welcome", func(t *testing.T) {
		hub, ctrl, updates, _ := readSession(t)
		hub.write(1, &wire.DesiredState{Generation: 1})
		<-updates
		if v := ctrl.version.Load(); v != 1 {
			t.Fatalf("the session speaks v%d after a version-1 hub's DesiredState", v)
		}
		go func() { _ = ctrl.send(&wire.Status{}) }()
		if env := hub.envelope(); env.Protocol != wire.ProtocolName(1) {
			t.Errorf("the agent answered a version-1 hub in %s", env.Protocol)
		}
	})
	t.Run("a Welcome in version 2", func(t *testing.T) {
		hub, ctrl, updates, _ := readSession(t)
		hub.write(2, &wire.Welcome{HubVersion: "v0.2.0"})
		hub.write(2, &wire.DesiredState{Generation: 1})
		<-updates
		if v := ctrl.version.Load(); v != 2 {
			t.Fatalf("the session speaks v%d after a Welcome in v2", v)
		}
		go func() { _ = ctrl.send(&wire.Status{}) }()
		if env := hub.envelope(); env.Protocol != wire.ProtocolName(2) {
			t.Errorf("the agent wrote %s in a version-2 session", env.Protocol)
		}
	})
}

// A hub this agent shares no version with ends the session with an error
// that says what to upgrade, which the retry loop waits long for.
func TestAHubOutsideTheAgentsVersionsIsAClearError(t *testing.T) {
	t.Run("the hub refuses the agent", func(t *testing.T) {
		hub, _, _, done := readSession(t)
		hub.write(wire.MaxProtocol, &wire.Error{Code: wire.ErrUnsupportedProtocol,
			Message: "fleet-agent v0.1.0 speaks protocol v1–v2, this hub serves v3: upgrade fleet-agent on this host"})
		err := <-done
		if _, ok := errors.AsType[*unsupportedError](err); !ok || !strings.Contains(err.Error(), "upgrade fleet-agent") {
			t.Fatalf("read returned %v, want the hub's refusal", err)
		}
	})
	t.Run("the hub writes a version the agent does not speak", func(t *testing.T) {
		hub, _, _, done := readSession(t)
		hub.writeFrame([]byte(`{"protocol":"fleet.edgefleet.io/v9","type":"DesiredState","payload":{"generation":1}}`))
		if env := hub.envelope(); env.Type != wire.TypeError {
			t.Errorf("the agent answered a v9 frame with %s", env.Type)
		}
		err := <-done
		if _, ok := errors.AsType[*unsupportedError](err); !ok || !strings.Contains(err.Error(), "upgrade the hub") {
			t.Fatalf("read returned %v, want a clear error", err)
		}
	})
	s := New(Options{MaxBackoff: 5 * time.Minute}, state.Store{Dir: t.TempDir()}, logr.Discard())
	attempt := 6
	var longest time.Duration
	for range 20 {
		a := attempt
		longest = max(longest, s.retryDelay(&unsupportedError{msg: "x"}, &a, time.Now()))
	}
	if longest <= 10*time.Second {
		t.Errorf("after a refusal the agent retries within %s: a session that just ended must not cap the backoff", longest)
	}
}
