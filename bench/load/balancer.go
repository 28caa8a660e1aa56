package load

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer stands for the gateway Service in front of several hub
// replicas: it hands each connection to the next replica in turn, passing
// over those that refuse, and dials from the client's own loopback address
// so that the hubs' per-source limits see the agents' sources, as through
// a load balancer that keeps them (externalTrafficPolicy: Local).
type Balancer struct {
	ln      net.Listener
	targets []string
	next    atomic.Uint64
	wg      sync.WaitGroup
}

// NewBalancer listens on a free loopback port.
func NewBalancer(targets ...string) (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{ln: ln, targets: targets}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

// URL is the balancer as agents dial it.
func (b *Balancer) URL() string { return "https://" + b.ln.Addr().String() }

// Close stops accepting; the connections it carries end with their ends.
func (b *Balancer) Close() {
	_ = b.ln.Close()
	b.wg.Wait()
}

func (b *Balancer) serve() {
	defer b.wg.Done()
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.carry(in)
	}
}

func (b *Balancer) carry(in net.Conn) {
	defer in.Close()
	src := &net.TCPAddr{IP: in.RemoteAddr().(*net.TCPAddr).IP}
	d := net.Dialer{LocalAddr: src, Timeout: 2 * time.Second}
	start := b.next.Add(1)
	var out net.Conn
	for i := range len(b.targets) {
		var err error
		if out, err = d.Dial("tcp", b.targets[(int(start)+i)%len(b.targets)]); err == nil {
			break
		}
	}
	if out == nil {
		return
	}
	defer out.Close()
	go func() {
		_, _ = io.Copy(out, in)
		_ = out.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(in, out)
}
