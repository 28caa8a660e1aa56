package admission

import (
	"net"
	"testing"
	"time"
)

// Connections are counted per source and in all, pending and established:
// beyond a cap a new connection is refused before any handshake work, and
// every count returns to zero as connections end.
func TestConnectionCountsAreBounded(t *testing.T) {
	c := newConnCounts(Limits{Pending: 3, PendingPerSource: 2, Connections: 3, ConnectionsPerSource: 2})
	if r := c.enter("a"); r != "" {
		t.Fatalf("first from a refused: %s", r)
	}
	if r := c.enter("a"); r != "" {
		t.Fatalf("second from a refused: %s", r)
	}
	if r := c.enter("a"); r != "too_many_pending" {
		t.Fatalf("third pending from a: %q, want too_many_pending", r)
	}
	if r := c.enter("b"); r != "" {
		t.Fatalf("b refused while a held its share: %s", r)
	}
	if r := c.enter("c"); r != "too_many_pending" {
		t.Fatalf("fourth pending in all: %q, want too_many_pending", r)
	}
	// Both of a's handshakes succeed; b's fails.
	for range 2 {
		if !c.leave("a", true) {
			t.Fatal("a's established connections were refused")
		}
	}
	c.leave("b", false)
	if r := c.enter("a"); r != "too_many_connections" {
		t.Fatalf("a with two open: %q, want too_many_connections", r)
	}
	if r := c.enter("b"); r != "" {
		t.Fatalf("b refused: %s", r)
	}
	if !c.leave("b", true) {
		t.Fatal("b's connection was refused")
	}
	if r := c.enter("c"); r != "too_many_connections" {
		t.Fatalf("c with three open in all: %q, want too_many_connections", r)
	}
	c.closed("a")
	c.closed("a")
	c.closed("b")
	if c.pendingAll != 0 || c.allOpen != 0 || len(c.pending) != 0 || len(c.open) != 0 {
		t.Fatalf("counts left after every connection ended: pending %d/%v open %d/%v", c.pendingAll, c.pending, c.allOpen, c.open)
	}
}

// An IPv6 site counts as its /64; IPv4 addresses count alone.
func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:443":     "192.0.2.7",
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := sourceOf(fakeConn{remote: a}); got != want {
			t.Errorf("sourceOf(%s) = %q, want %q", addr, got, want)
		}
	}
}

type fakeConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeConn) RemoteAddr() net.Addr { return c.remote }

// A first record that is not a ClientHello is refused before a place.
func TestReadClientHelloRefusesOtherRecords(t *testing.T) {
	for name, first := range map[string][]byte{
		"http":               []byte("GET / HTTP/1.1\r\n\r\n"),
		"application data":   {23, 3, 3, 0, 5, 1, 2, 3, 4, 5},
		"a server hello":     {22, 3, 3, 0, 4, 2, 0, 0, 0},
		"an oversized hello": {22, 3, 1, 0x7f, 0xff},
	} {
		a, b := net.Pipe()
		go func() { _, _ = a.Write(first); _ = a.Close() }()
		if _, err := readClientHello(b, time.Second); err == nil {
			t.Errorf("%s: taken for a ClientHello", name)
		}
		_ = b.Close()
	}
}
