package admission

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
)

// The gateway does at most MaxConcurrentTLSHandshakes TLS handshakes at
// once: a connection beyond that waits for a place, in line, and is
// closed if none frees within the wait; it is served as soon as one does.
func TestTLSHandshakesAreBounded(t *testing.T) {
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.ServingCertificate(nil, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	serverCfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{serving}}
	clientCfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "127.0.0.1"}

	listen := func(wait time.Duration) (*Listener, <-chan net.Conn) {
		raw, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := NewListener(raw, serverCfg, Limits{Handshakes: 1, HandshakesPerSource: 1, Pending: 100, PendingPerSource: 100,
			Connections: 100, ConnectionsPerSource: 100, Wait: wait, Timeout: 5 * time.Second})
		t.Cleanup(func() { _ = l.Close() })
		accepted := make(chan net.Conn, 4)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					close(accepted)
					return
				}
				accepted <- c
			}
		}()
		return l, accepted
	}
	// stall takes the only place: a connection that sends its ClientHello
	// and nothing more. One that sends nothing at all takes none.
	stall := func(l *Listener) net.Conn {
		idle, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer idle.Close()
		time.Sleep(100 * time.Millisecond)
		if n := l.places.inUse(); n != 0 {
			t.Fatalf("a connection that sent nothing took a place (%d in use)", n)
		}
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(firstRecord(t, clientCfg)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); l.places.inUse() != 1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the silent connection took no place")
			}
		}
		return c
	}
	dial := func(l *Listener) <-chan error {
		errc := make(chan error, 1)
		go func() {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", l.Addr().String(), clientCfg)
			if err == nil {
				// TLS 1.3: the server's verdict arrives with the first read.
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				_, err = c.Read(make([]byte, 1))
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					err = nil
				}
				_ = c.Close()
			}
			errc <- err
		}()
		return errc
	}

	t.Run("no place within the wait: closed", func(t *testing.T) {
		l, accepted := listen(200 * time.Millisecond)
		staller := stall(l)
		defer staller.Close()
		busy := testutil.ToFloat64(tlsHandshakes.WithLabelValues("busy"))
		err := <-dial(l)
		if err == nil {
			t.Fatal("a handshake beyond the limit succeeded while the only place was held")
		}
		// The agent takes this for a busy hub and comes back soon.
		if !transport.ClosedUnserved(err) {
			t.Errorf("the client saw %v, which agents do not take for a connection closed unserved", err)
		}
		if got := testutil.ToFloat64(tlsHandshakes.WithLabelValues("busy")) - busy; got != 1 {
			t.Errorf("busy handshakes counted %v, want 1", got)
		}
		select {
		case c := <-accepted:
			t.Fatalf("a connection was handed on: %v", c.RemoteAddr())
		default:
		}
	})

	t.Run("a place frees: served", func(t *testing.T) {
		l, accepted := listen(time.Minute)
		staller := stall(l)
		errc := dial(l)
		select {
		case err := <-errc:
			t.Fatalf("the handshake ended (%v) while the only place was held; want it to wait", err)
		case <-time.After(300 * time.Millisecond):
		}
		failed := testutil.ToFloat64(tlsHandshakes.WithLabelValues("failed"))
		_ = staller.Close() // its handshake fails and gives the place back
		if err := <-errc; err != nil {
			t.Fatalf("the waiting handshake: %v", err)
		}
		if c := <-accepted; c == nil {
			t.Fatal("the served connection was not handed on")
		} else if !c.(*tls.Conn).ConnectionState().HandshakeComplete {
			t.Fatal("a connection was handed on before its handshake")
		}
		if got := testutil.ToFloat64(tlsHandshakes.WithLabelValues("failed")) - failed; got != 1 {
			t.Errorf("failed handshakes counted %v, want 1 (the silent connection)", got)
		}
		_ = l.Close()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}

// firstRecord is the first TLS record (the ClientHello) a client with cfg
// sends.
func firstRecord(t *testing.T, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _ = tls.Client(a, cfg).Handshake() }()
	rec, err := readClientHello(b, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
