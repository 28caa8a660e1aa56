package testkit

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Forwarder is the gateway's address as agents know it (a DNS name, or a
// load balancer, in a real fleet): it forwards each connection to the
// first of its targets that answers, until re-pointed.
type Forwarder struct {
	ln      net.Listener
	mu      sync.Mutex
	targets []string
}

// NewForwarder listens on a free local port until the test ends.
func NewForwarder(t testing.TB, targets ...string) *Forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Forwarder{ln: ln, targets: targets}
	t.Cleanup(func() { _ = ln.Close() })
	go f.serve()
	return f
}

// Addr is where the forwarder listens.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// Repoint sends new connections to targets; established ones stay where
// they are, as with a DNS change.
func (f *Forwarder) Repoint(targets ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = targets
}

func (f *Forwarder) serve() {
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		targets := f.targets
		f.mu.Unlock()
		go func() {
			defer in.Close()
			var out net.Conn
			for _, target := range targets {
				if out, err = net.DialTimeout("tcp", target, 2*time.Second); err == nil {
					break
				}
			}
			if out == nil {
				return
			}
			defer out.Close()
			go func() { _, _ = io.Copy(out, in); _ = out.(*net.TCPConn).CloseWrite() }()
			_, _ = io.Copy(in, out)
		}()
	}
}
