package admission

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// connCounts counts, per source address and in all, the connections that
// are being admitted (accepted, handshake not finished) and those
// established, against Limits.
type connCounts struct {
	lim Limits

	mu                  sync.Mutex
	pending, open       map[string]int
	pendingAll, allOpen int
}

func newConnCounts(lim Limits) *connCounts {
	return &connCounts{lim: lim, pending: map[string]int{}, open: map[string]int{}}
}

// enter admits a new connection from src to its handshake, or says why
// not (the metric's result).
func (c *connCounts) enter(src string) (refused string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.allOpen >= c.lim.Connections || c.open[src] >= c.lim.ConnectionsPerSource:
		return "too_many_connections"
	case c.pendingAll >= c.lim.Pending || c.pending[src] >= c.lim.PendingPerSource:
		return "too_many_pending"
	}
	c.pending[src]++
	c.pendingAll++
	return ""
}

// leave ends a connection's admission; established says its handshake
// succeeded, and the result says whether it may stay open.
func (c *connCounts) leave(src string, established bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending[src]--; c.pending[src] <= 0 {
		delete(c.pending, src)
	}
	c.pendingAll--
	if !established || c.allOpen >= c.lim.Connections || c.open[src] >= c.lim.ConnectionsPerSource {
		return false
	}
	c.open[src]++
	c.allOpen++
	return true
}

// closed forgets an established connection.
func (c *connCounts) closed(src string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[src]--; c.open[src] <= 0 {
		delete(c.open, src)
	}
	c.allOpen--
}

// sourceOf names the source a connection counts against: its IPv4
// address, or the /64 of its IPv6 address (what one site is given).
func sourceOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if a.IP.To4() == nil && len(a.IP) == net.IPv6len {
			return a.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// maxClientHelloRecord bounds the first TLS record: a plaintext record is
// at most 2^14 bytes.
const maxClientHelloRecord = 1 << 14

var errNotClientHello = errors.New("the first record is not a TLS ClientHello")

// readClientHello reads the connection's first TLS record within wait and
// returns it if it starts a ClientHello. It reads the 5-byte header first
// and allocates only what the header announces.
func readClientHello(c net.Conn, wait time.Duration) ([]byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, fmt.Errorf("waiting for a ClientHello: %w", err)
	}
	// Content type 22 (handshake), legacy version 3.x.
	n := int(binary.BigEndian.Uint16(hdr[3:]))
	if hdr[0] != 22 || hdr[1] != 3 || n < 4 || n > maxClientHelloRecord {
		return nil, errNotClientHello
	}
	rec := make([]byte, 5+n)
	copy(rec, hdr[:])
	if _, err := io.ReadFull(c, rec[5:]); err != nil {
		return nil, fmt.Errorf("reading a ClientHello: %w", err)
	}
	if rec[5] != 1 { // handshake type client_hello
		return nil, errNotClientHello
	}
	return rec, nil
}

// sourceConn is the TCP connection under a TLS session: it first hands
// over the ClientHello record read before the handshake, and tells the
// connection counts when it closes. It keeps the socket reachable
// (syscall.Conn) for transport.HubConn's wait on it.
type sourceConn struct {
	net.Conn
	pre     []byte
	release func()
	once    sync.Once
}

func (c *sourceConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		if c.pre = c.pre[n:]; len(c.pre) == 0 {
			c.pre = nil
		}
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *sourceConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.release != nil {
			c.release()
		}
	})
	return err
}

// SyscallConn is the socket's, so that a session can wait on it.
func (c *sourceConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	return sc.SyscallConn()
}
