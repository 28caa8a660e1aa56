package agent

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// tunnelPair runs an agent's tunnel server on one end of an in-memory
// session and returns the hub's end.
func tunnelPair(t *testing.T, a *Agent) *hubmux.Session {
	t.Helper()
	hubSide, agentSide := net.Pipe()
	hub := hubmux.Server(hubSide, hubmux.Config{})
	go func() { _ = hub.Serve() }()
	agent, err := transport.Client(agentSide, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go a.tunnels.accept(ctx, agent)
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
	a := New(Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, Unavailable{}, logr.Discard())
	addr := echoServer(t)
	_, port, _ := net.SplitHostPort(addr)
	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:" + port, Addresses: []string{"127.0.0.1"}, Tunnels: true})
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
	if a.tunnels.served.Load() != 1 {
		t.Errorf("served %d tunnels", a.tunnels.served.Load())
	}
}

// Nothing but the cluster endpoint is ever dialled: not another address
// of the site, not another port, not anything before the host belongs to
// a cluster.
func TestTunnelRefusesOtherTargets(t *testing.T) {
	a := New(Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, Unavailable{}, logr.Discard())
	addr := echoServer(t)
	hub := tunnelPair(t, a)

	_, msg := askTunnel(t, hub, addr)
	if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrForbidden || !strings.Contains(e.Message, "belongs to no cluster") {
		t.Fatalf("before any cluster: %#v", msg)
	}
	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"127.0.0.1"}, Tunnels: true})
	for _, target := range []string{addr, "edge.ns.fleet.internal:22", "10.0.0.1:6443"} {
		_, msg := askTunnel(t, hub, target)
		if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrForbidden {
			t.Errorf("target %s: %#v, want Forbidden", target, msg)
		}
	}
	// Edge reach disabled for the cluster: not even the endpoint.
	a.setReach(&wire.Reach{Endpoint: addr, Addresses: []string{"127.0.0.1"}})
	if _, msg := askTunnel(t, hub, addr); msg.(*wire.Error).Code != wire.ErrForbidden {
		t.Errorf("with tunnels disabled: %#v", msg)
	}
	if a.tunnels.refused.Load() != 5 || a.tunnels.served.Load() != 0 {
		t.Errorf("refused %d, served %d", a.tunnels.refused.Load(), a.tunnels.served.Load())
	}
}

// An endpoint nobody listens on: the hub hears DialFailed, not silence.
func TestTunnelDialFailureIsReported(t *testing.T) {
	a := New(Config{StateDir: t.TempDir(), RootDir: t.TempDir()}, Unavailable{}, logr.Discard())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:" + port, Addresses: []string{"127.0.0.1"}, Tunnels: true})
	_, msg := askTunnel(t, tunnelPair(t, a), "edge.ns.fleet.internal:"+port)
	if e, ok := msg.(*wire.Error); !ok || e.Code != wire.ErrDialFailed {
		t.Fatalf("answer %#v, want DialFailed", msg)
	}
}

// The endpoint's name resolves at the site through a block of /etc/hosts
// the agent owns; the rest of the file is never touched.
func TestHostsEntryFollowsReach(t *testing.T) {
	root := t.TempDir()
	hosts := filepath.Join(root, "etc", "hosts")
	if err := os.MkdirAll(filepath.Dir(hosts), 0o755); err != nil {
		t.Fatal(err)
	}
	orig := "127.0.0.1 localhost\n10.1.2.3 printer # the shop's"
	if err := os.WriteFile(hosts, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	a := New(Config{StateDir: t.TempDir(), RootDir: root}, Unavailable{}, logr.Discard())
	read := func() string {
		b, err := os.ReadFile(hosts)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.5", "10.0.0.6"}})
	want := orig + "\n" + hostsBegin + "10.0.0.5 edge.ns.fleet.internal\n10.0.0.6 edge.ns.fleet.internal\n" + hostsEnd
	if got := read(); got != want {
		t.Fatalf("hosts:\n%s\nwant:\n%s", got, want)
	}
	// The control plane moved: the entry follows, still once.
	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.7"}})
	want = orig + "\n" + hostsBegin + "10.0.0.7 edge.ns.fleet.internal\n" + hostsEnd
	if got := read(); got != want {
		t.Fatalf("after a move:\n%s\nwant:\n%s", got, want)
	}
	// Released: the block goes, the rest stays.
	a.setReach(nil)
	if got := read(); got != orig+"\n" {
		t.Fatalf("after release:\n%q\nwant:\n%q", got, orig+"\n")
	}
	// An address, or a name outside fleet's zone (a load balancer's, in
	// the site's DNS), gets no entry.
	for _, ep := range []string{"192.0.2.10:6443", "api.store-17.example.com:6443"} {
		a.setReach(&wire.Reach{Endpoint: ep, Addresses: []string{"10.0.0.7"}})
		if got := read(); strings.Contains(got, hostsBegin) {
			t.Fatalf("entry for %s:\n%s", ep, got)
		}
	}
	// Someone deleted our END line: nothing of theirs is lost.
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n"+hostsBegin+"10.0.0.7 edge.ns.fleet.internal\n10.1.2.3 printer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.setReach(&wire.Reach{Endpoint: "edge.ns.fleet.internal:6443", Addresses: []string{"10.0.0.8"}})
	if got := read(); !strings.Contains(got, "10.1.2.3 printer\n") || !strings.HasSuffix(got, hostsBegin+"10.0.0.8 edge.ns.fleet.internal\n"+hostsEnd) {
		t.Fatalf("after a damaged block:\n%s", got)
	}
}
