package gateway_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
)

// flakyLink is a TCP relay between agents and the hub that can go dark:
// bytes stop flowing and new connections hang up, without any close
// reaching either end — what a cut uplink at a site looks like.
type flakyLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	dark   bool
	conns  []net.Conn
}

func newFlakyLink(t *testing.T, target string) *flakyLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	l := &flakyLink{ln: ln, target: target}
	go l.serve()
	t.Cleanup(func() { _ = ln.Close(); l.cut(true) })
	return l
}

func (l *flakyLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		dark := l.dark
		l.mu.Unlock()
		if dark {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		go l.pipe(c, up)
		go l.pipe(up, c)
	}
}

// pipe copies until the link goes dark, then swallows everything.
func (l *flakyLink) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		l.mu.Lock()
		dark := l.dark
		l.mu.Unlock()
		if err != nil {
			if !errors.Is(err, io.EOF) || dark {
				return
			}
			_ = dst.Close()
			return
		}
		if !dark {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// cut darkens the link; with drop, the old connections are also closed
// (silently, from the relay's side only) once the test is done with them.
func (l *flakyLink) cut(drop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dark = true
	if drop {
		for _, c := range l.conns {
			_ = c.Close()
		}
		l.conns = nil
	}
}

func (l *flakyLink) restore() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dark = false
	for _, c := range l.conns {
		_ = c.Close() // the dead sessions; agents dial anew
	}
	l.conns = nil
}

// A link cut with no close reaching either end: the hub notices by its own
// clock (keep-alive), shows the host disconnected, the agent keeps its state,
// and once the link is back it reconnects and the host shows connected.
func TestLinkCut(t *testing.T) {
	ns := newNamespace(t)
	h := startHub(t, hubOptions{ns: ns})
	link := newFlakyLink(t, h.srv.Addr())
	tok := newToken(t, ns, enrolltoken.Options{})
	e := newEdge(t, "depot", "https://"+link.ln.Addr().String(), h.srv.CA().Pin(), tok).start()
	bootstrapSecret(t, ns, "boot", "#cloud-config\n")
	eventually(t, "enrolled", func() error { _, err := getHost(ns, "depot"); return err })
	claim(t, ns, "depot", "m", "boot")
	eventually(t, "provisioned and connected", func() error {
		if len(e.rec.Provisions()) != 1 {
			return errors.New("not provisioned")
		}
		if s, err := connectedStatus(ns, "depot"); err != nil || s != "True" {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})

	link.cut(false)
	eventually(t, "hub shows the host disconnected", func() error {
		if s, err := connectedStatus(ns, "depot"); err != nil || s != "False" {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})
	time.Sleep(time.Second)
	link.restore()
	eventually(t, "reconnected and shown connected", func() error {
		if e.agent.Sessions() < 2 || !e.agent.Connected() {
			return fmt.Errorf("sessions %d connected %v", e.agent.Sessions(), e.agent.Connected())
		}
		if s, err := connectedStatus(ns, "depot"); err != nil || s != "True" {
			return fmt.Errorf("AgentConnected %s %v", s, err)
		}
		return nil
	})
	if n := len(e.rec.Provisions()); n != 1 {
		t.Errorf("provisioned %d times across the cut, want 1", n)
	}
	if a := e.agent.Applied(); a.Workload == nil || a.Generation == 0 {
		t.Errorf("agent lost its state: %+v", a)
	}
}
