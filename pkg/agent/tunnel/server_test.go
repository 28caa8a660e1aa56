package tunnel_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/reach"
	"github.com/edgefleet/fleet/pkg/agent/streams"
	"github.com/edgefleet/fleet/pkg/agent/tunnel"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// edge is the part of an agent that edge reach takes: the reach owner and
// the tunnel server it checks targets with.
type edge struct {
	reach   *reach.Owner
	tunnels *tunnel.Server
}

func newEdge(t *testing.T) *edge {
	o := reach.NewOwner(t.TempDir(), logr.Discard())
	return &edge{reach: o, tunnels: &tunnel.Server{Targets: o.DialTargets, Log: logr.Discard()}}
}

// tunnelPair runs an agent's tunnel server on one end of an in-memory
// session and returns the hub's end.
func tunnelPair(t *testing.T, a *edge) *hubmux.Session {
	t.Helper()
	hubSide, agentSide := net.Pipe()
	hub := hubmux.Server(hubSide, hubmux.Config{})
	go func() { _ = hub.Serve() }()
	agent, err := transport.Client(agentSide, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &streams.Mux{Handlers: map[wire.Type]streams.Handler{wire.TypeTunnel: a.tunnels.Handler}, Log: logr.Discard()}
	go m.Accept(ctx, agent)
	t.Cleanup(func() { cancel(); hub.Close(); agent.Close() })
	return hub
}

func askTunnel(t *testing.T, hub *hubmux.Session, target string) (net.Conn, any) {
	t.Helper()
	st, err := hub.Open()
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := wire.Encode(&wire.Tunnel{Target: target})
	if err := wire.WriteFrame(st, frame); err != nil {
		t.Fatal(err)
	}
	reply, err := wire.ReadFrame(st, wire.MaxTunnelFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := wire.Decode(reply)
	if err != nil {
		t.Fatal(err)
	}
	return st, msg
}

// echoServer answers each connection with what it reads, upper-cased.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				_, _ = c.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	return ln.Addr().String()
}

// The agent dials its cluster's endpoint — by the address the hub gave
// for its name — and carries bytes both ways, half-close included.
func TestTunnelCarriesBytesToTheEndpoint(t *testing.T) {
	a := newEdge(t)
	addr := echoServer(t)
	_, port, _ := net.SplitHostPort(addr)
	a.reach.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:" + port, Addresses: []string{"127.0.0.1"}, Tunnels: true}))
	hub := tunnelPair(t, a)

	st, msg := askTunnel(t, hub, "edge.ns.fleet.internal:"+port)
	if _, ok := msg.(*wire.TunnelReady); !ok {
		t.Fatalf("answer %#v, want TunnelReady", msg)
	}
	if _, err := st.Write([]byte("hello edge")); err != nil {
		t.Fatal(err)
	}
	_ = st.Close() // half-close: the server sees EOF and answers
	got, err := io.ReadAll(st)
	if err != nil || string(got) != "HELLO EDGE" {
		t.Fatalf("read %q, %v", got, err)
	}
	if a.tunnels.Served() != 1 {
		t.Errorf("served %d tunnels", a.tunnels.Served())
	}
}

// Nothing but the cluster endpoint is ever dialled: not another address
// of the site, not another port, not anything before the host belongs to
// a cluster.
func TestTunnelRefusesOtherTargets(t *testing.T) {
	a := newEdge(t)
	addr := echoServer(t)
	hub := tunnelPair(t, a)

	_, msg := askTunnel(t, hub, addr)
	if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrForbidden || !strings.Contains(e.Message, "belongs to no cluster") {
		t.Fatalf("before any cluster: %#v", msg)
	}
	a.reach.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"127.0.0.1"}, Tunnels: true}))
	for _, target := range []string{addr, "edge.ns.fleet.internal:22", "10.0.0.1:6443"} {
		_, msg := askTunnel(t, hub, target)
		if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrForbidden {
			t.Errorf("target %s: %#v, want Forbidden", target, msg)
		}
	}
	// Edge reach disabled for the cluster: not even the endpoint.
	a.reach.Set(assigned(&wire.Reach{Endpoint: addr, Addresses: []string{"127.0.0.1"}}))
	if _, msg := askTunnel(t, hub, addr); msg.(*wire.Error).Code != wire.ErrForbidden {
		t.Errorf("with tunnels disabled: %#v", msg)
	}
	if a.tunnels.Refused() != 5 || a.tunnels.Served() != 0 {
		t.Errorf("refused %d, served %d", a.tunnels.Refused(), a.tunnels.Served())
	}
}

// An endpoint nobody listens on: the hub hears DialFailed, not silence.
func TestTunnelDialFailureIsReported(t *testing.T) {
	a := newEdge(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	a.reach.Set(assigned(&wire.Reach{Endpoint: "edge.ns.fleet.internal:" + port, Addresses: []string{"127.0.0.1"}, Tunnels: true}))
	_, msg := askTunnel(t, tunnelPair(t, a), "edge.ns.fleet.internal:"+port)
	if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrDialFailed {
		t.Fatalf("answer %#v, want DialFailed", msg)
	}
}

// assigned is a desired state carrying r for an assignment of its own per
// endpoint (nil: no assignment): the agent holds an assignment to the
// endpoint it was first given with it.
func assigned(r *wire.Reach) *wire.DesiredState {
	if r == nil {
		return &wire.DesiredState{}
	}
	return &wire.DesiredState{Reach: r, Assignment: &wire.Assignment{ClaimUID: types.UID("claim-" + r.Endpoint),
		MachineName: "m", BootstrapData: []byte("#cloud-config\n")}}
}

// A hub that re-aims an assignment's endpoint is not followed: tunnels
// still go to the endpoint given with the assignment, and only a new
// assignment changes it. Addresses may change (control-plane hosts move).
func TestReachIsHeldToTheAssignment(t *testing.T) {
	a := newEdge(t)
	addr := echoServer(t)
	_, port, _ := net.SplitHostPort(addr)
	ep := "edge.ns.fleet.internal:" + port
	claim := &wire.Assignment{ClaimUID: "claim-1", MachineName: "m", BootstrapData: []byte("#cloud-config\n")}
	a.reach.Set(&wire.DesiredState{Assignment: claim, Reach: &wire.Reach{Endpoint: ep, Addresses: []string{"127.0.0.1"}, Tunnels: true}})
	hub := tunnelPair(t, a)

	// Re-aimed at two other ports within a second, same assignment.
	for _, other := range []string{"edge.ns.fleet.internal:22", "edge.ns.fleet.internal:2379"} {
		a.reach.Set(&wire.DesiredState{Assignment: claim, Reach: &wire.Reach{Endpoint: other, Addresses: []string{"127.0.0.1"}, Tunnels: true}})
		if _, msg := askTunnel(t, hub, other); msg.(*wire.Error).Code != wire.ErrForbidden {
			t.Errorf("re-aimed at %s: %#v, want Forbidden", other, msg)
		}
		if got := a.reach.Current(); got == nil || got.Endpoint != ep {
			t.Fatalf("reach after re-aiming at %s: %+v, want endpoint %s", other, got, ep)
		}
	}
	if _, msg := askTunnel(t, hub, ep); msg == nil {
		t.Fatal("no answer")
	} else if _, ok := msg.(*wire.TunnelReady); !ok {
		t.Fatalf("the assignment's own endpoint: %#v, want TunnelReady", msg)
	}
	// A new assignment brings its own endpoint.
	next := &wire.Assignment{ClaimUID: "claim-2", MachineName: "m2", BootstrapData: []byte("#cloud-config\n")}
	a.reach.Set(&wire.DesiredState{Assignment: next, Reach: &wire.Reach{Endpoint: "other.ns.fleet.internal:6443", Tunnels: true}})
	if got := a.reach.Current(); got == nil || got.Endpoint != "other.ns.fleet.internal:6443" {
		t.Fatalf("reach after a new assignment: %+v", got)
	}
}
