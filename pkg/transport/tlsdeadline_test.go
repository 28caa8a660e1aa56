package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
)

// HubConn.Buffered asks crypto/tls what it holds by reading with the read
// deadline in the past. crypto/tls does not document what that does; this
// test pins the three things Buffered needs, over real TLS 1.2 and 1.3
// connections on loopback TCP, so that a Go release that changes them
// fails here, loudly, instead of leaving idle agents' data unread.
func TestCryptoTLSSurvivesReadPastDeadline(t *testing.T) {
	for name, version := range map[string]uint16{"TLS 1.2": tls.VersionTLS12, "TLS 1.3": tls.VersionTLS13} {
		t.Run(name, func(t *testing.T) {
			t.Run("nothing sent", func(t *testing.T) {
				hub, agent, _ := tlsPair(t, version)
				for range 2 {
					readPastDeadlineTimesOut(t, hub)
				}
				writeAndRead(t, agent, hub, "after")
			})
			t.Run("data already decrypted", func(t *testing.T) {
				hub, agent, _ := tlsPair(t, version)
				if _, err := agent.Write([]byte("abcdef")); err != nil {
					t.Fatal(err)
				}
				readWithin(t, hub, "abc")
				// The rest of the record is inside crypto/tls: Buffered
				// counts it as waiting only if this read returns it.
				_ = hub.SetReadDeadline(time.Unix(1, 0))
				b := make([]byte, 1)
				if n, err := hub.Read(b); n != 1 || err != nil || b[0] != 'd' {
					brokenAssumption(t, "returns data it already holds when the read deadline has passed",
						"Read = %d, %v (byte %q); want 1 byte, 'd', no error", n, err, b[:n])
				}
				readWithin(t, hub, "ef")
			})
			t.Run("half a record arrived", func(t *testing.T) {
				hub, agent, split := tlsPair(t, version)
				split.arm()
				if _, err := agent.Write([]byte("first")); err != nil {
					t.Fatal(err)
				}
				wrote := make(chan error, 1)
				go func() {
					_, err := agent.Write([]byte("second"))
					wrote <- err
				}()
				<-split.sentHead
				// "first" arrives with the head of the next record, which
				// crypto/tls keeps while it waits for the rest.
				readWithin(t, hub, "first")
				readPastDeadlineTimesOut(t, hub)
				close(split.release)
				if err := <-wrote; err != nil {
					t.Fatal(err)
				}
				readWithin(t, hub, "second")
			})
		})
	}
}

// brokenAssumption fails the test with a message that says what changed
// and what depends on it.
func brokenAssumption(t *testing.T, assumption, format string, args ...any) {
	t.Helper()
	t.Fatalf("\n"+
		"*** %s: crypto/tls no longer %s. ***\n"+
		"    %s\n"+
		"transport.HubConn.Buffered reads with the deadline in the past to learn what crypto/tls holds\n"+
		"(see the package comment). Fix HubConn for this Go release; meanwhile the hub can serve\n"+
		"sessions with hashicorp/yamux instead (hubmux.New with hubmux.KindYamux).",
		runtime.Version(), assumption, fmt.Sprintf(format, args...))
}

// readPastDeadlineTimesOut reads with the deadline passed and nothing
// waiting inside crypto/tls: the read must time out without breaking the
// connection.
func readPastDeadlineTimesOut(t *testing.T, c *tls.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Unix(1, 0))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		brokenAssumption(t, "answers a Read whose deadline has passed with a timeout",
			"Read = %d, %v; want 0 and a net.Error timeout that is os.ErrDeadlineExceeded", n, err)
	}
}

func writeAndRead(t *testing.T, from, to *tls.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	readWithin(t, to, msg)
}

// readWithin reads want with a live deadline; after a read past the
// deadline this is where a connection that kept the timeout fails.
func readWithin(t *testing.T, c *tls.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if n, err := io.ReadFull(c, got); err != nil || string(got) != want {
		brokenAssumption(t, "leaves a connection usable after a Read whose deadline had passed",
			"then, with a live deadline, read %q (%d bytes), %v; want %q", got[:n], n, err, want)
	}
}

// recordSplitter is the agent's TCP connection. Once armed, it holds one
// write (one TLS record) back and sends it with the first 5 bytes of the
// next (a record header), then the rest of that when release is closed.
type recordSplitter struct {
	net.Conn
	armed    bool
	held     []byte
	sentHead chan struct{}
	release  chan struct{}
}

func (c *recordSplitter) arm() { c.armed = true }

func (c *recordSplitter) Write(p []byte) (int, error) {
	if !c.armed {
		return c.Conn.Write(p)
	}
	if c.held == nil {
		c.held = append([]byte(nil), p...)
		return len(p), nil
	}
	c.armed = false
	if _, err := c.Conn.Write(append(c.held, p[:5]...)); err != nil {
		return 0, err
	}
	close(c.sentHead)
	<-c.release
	if _, err := c.Conn.Write(p[5:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// tlsPair returns the two ends of a TLS connection of the given version
// over loopback TCP, handshake done: the server's end (the hub's), the
// client's, and the client's TCP connection beneath.
func tlsPair(t *testing.T, version uint16) (hub, agent *tls.Conn, split *recordSplitter) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hub"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)

	client, server := testkit.TCPPair(t)
	split = &recordSplitter{Conn: client, sentHead: make(chan struct{}), release: make(chan struct{})}
	hub = tls.Server(server, &tls.Config{MinVersion: version, MaxVersion: version,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}})
	agent = tls.Client(split, &tls.Config{MinVersion: version, MaxVersion: version,
		RootCAs: roots, ServerName: "127.0.0.1"})
	t.Cleanup(func() { _ = agent.Close(); _ = hub.Close() })
	handshook := make(chan error, 1)
	go func() { handshook <- hub.Handshake() }()
	if err := agent.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshook; err != nil {
		t.Fatal(err)
	}
	if hub.ConnectionState().Version != version {
		t.Fatalf("negotiated TLS version %#x, want %#x", hub.ConnectionState().Version, version)
	}
	return hub, agent, split
}
