package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
)

func TestRetryDelay(t *testing.T) {
	a := &Source{opts: Options{MaxBackoff: time.Minute}}
	for range 200 {
		// Busy: honour Retry-After, spread over one more interval; the
		// back-off does not grow.
		attempt := 3
		d := a.retryDelay(fmt.Errorf("wrapped: %w", &busyError{after: 2 * time.Second}), &attempt, time.Time{})
		if d < 2*time.Second || d >= 4*time.Second || attempt != 3 {
			t.Fatalf("busy: delay %s attempt %d", d, attempt)
		}
		attempt = 0
		if d := a.retryDelay(&EnrollError{Status: http.StatusServiceUnavailable}, &attempt, time.Time{}); d < 5*time.Second || d >= 10*time.Second || attempt != 0 {
			t.Fatalf("busy enrollment: delay %s attempt %d", d, attempt)
		}
		// Rate-limited or a contended token, with the hub's Retry-After.
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
			d := a.retryDelay(&EnrollError{Status: status, RetryAfter: time.Second}, &attempt, time.Time{})
			if d < time.Second || d >= 2*time.Second || attempt != 0 {
				t.Fatalf("enrollment %d with Retry-After 1: delay %s attempt %d", status, d, attempt)
			}
		}
		// The hub held a session a moment ago (it is restarting): at most
		// 10 s, however many attempts.
		attempt = 10
		if d := a.retryDelay(errors.New("connection refused"), &attempt, time.Now().Add(-time.Minute)); d > 10*time.Second+100*time.Millisecond || attempt != 11 {
			t.Fatalf("recent session: delay %s attempt %d", d, attempt)
		}
	}
	// Never connected (or long ago): the full back-off, up to MaxBackoff.
	longest := time.Duration(0)
	for range 200 {
		attempt := 10
		longest = max(longest, a.retryDelay(errors.New("connection refused"), &attempt, time.Time{}))
	}
	if longest <= 10*time.Second || longest > time.Minute+100*time.Millisecond {
		t.Errorf("no recent session: longest delay %s, want over 10 s and at most 1 min", longest)
	}
}

// A hub that accepts a connection and closes it before the TLS handshake
// is shedding a crowd, not gone: however often that happened, the agent
// comes back within a few seconds, and the back-off still grows (a
// refusal after it is backed off from where it stands).
func TestRetryDelayAfterAConnectionClosedUnserved(t *testing.T) {
	a := &Source{opts: Options{MaxBackoff: time.Minute}}
	for _, cause := range []error{syscall.ECONNRESET, io.EOF} {
		unserved := &unservedError{err: &net.OpError{Op: "read", Net: "tcp", Err: cause}}
		attempt := 10
		for range 200 {
			if d := a.retryDelay(unserved, &attempt, time.Time{}); d > unservedCeiling+100*time.Millisecond {
				t.Fatalf("closed unserved (%v) on attempt %d: delay %s, want at most %s", cause, attempt, d, unservedCeiling)
			}
		}
		if attempt != 210 {
			t.Errorf("attempts counted %d, want 210", attempt)
		}
	}
}

// Which dial failures count as closed unserved: what the hub's handshake
// admission does (reset, or end of stream before the server's hello) and
// nothing that says the hub is absent.
func TestClosedUnservedIsOnlyAClosedConnection(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{io.EOF, true},
		{fmt.Errorf("tls: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{context.DeadlineExceeded, false},
		{errors.New("x509: certificate signed by unknown authority"), false},
	} {
		if got := transport.ClosedUnserved(c.err); got != c.want {
			t.Errorf("ClosedUnserved(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// connectOnce tells a hub that is up but does not serve the connection
// (accepts it, then closes it or stays silent past the dial's deadline)
// from a hub that is not there (nothing listening): only the first keeps
// the back-off short.
func TestConnectOnceTellsAnUnservedConnectionFromAnAbsentHub(t *testing.T) {
	ca, keyPEM, certPEM := enrolledHost(t)
	listen := func(serve func(net.Conn)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				serve(c)
			}
		}()
		return l.Addr().String()
	}
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			_ = c.Close()
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	absent := l.Addr().String()
	_ = l.Close() // nothing listens there now
	for _, c := range []struct {
		name, hub string
		unserved  bool
	}{
		{"accepted and closed", listen(func(c net.Conn) { _ = c.Close() }), true},
		{"accepted and left silent", listen(func(c net.Conn) { silent = append(silent, c) }), true},
		{"nothing listening", absent, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := New(Options{Hub: c.hub, MaxBackoff: time.Minute}, state.Store{Dir: t.TempDir()}, logr.Discard())
			if err := a.store.SaveIdentity(state.Identity{Hub: c.hub, Namespace: "stores", Host: "store-1", UID: "uid-1"}, ca.CertPEM, keyPEM, certPEM); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := a.connectOnce(ctx)
			if _, unserved := errors.AsType[*unservedError](err); unserved != c.unserved {
				t.Fatalf("connectOnce: %v; taken for a connection the hub did not serve: %v, want %v", err, unserved, c.unserved)
			}
			attempt := 10
			if d := a.retryDelay(err, &attempt, time.Time{}); c.unserved && d > unservedCeiling+100*time.Millisecond {
				t.Errorf("retry in %s, want at most %s", d, unservedCeiling)
			}
		})
	}
}

// enrolledHost is a hub CA and the key and certificate it gave host
// stores/store-1.
func enrolledHost(t *testing.T) (ca *pki.CA, keyPEM, certPEM []byte) {
	t.Helper()
	ca, err := pki.NewCA("hub", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, csrPEM, err := pki.NewKeyAndCSR("store-1")
	if err != nil {
		t.Fatal(err)
	}
	if certPEM, err = ca.SignClient(csrPEM, pki.Identity{Namespace: "stores", Name: "store-1", UID: "uid-1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return ca, keyPEM, certPEM
}
