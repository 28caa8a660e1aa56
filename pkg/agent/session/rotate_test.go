package session

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
)

// A certificate is renewed at 70–90 % of its lifetime by the hub's clock,
// which the Welcome tells, not by the host's: a host an hour behind must
// not let a certificate expire, one an hour ahead must not renew a fresh
// one. The agent reports how far its clock is off.
func TestRotationsFollowTheHubsClock(t *testing.T) {
	for _, c := range []struct {
		name     string
		hubAhead time.Duration
		// the certificate's lifetime, around the hub's now
		from, to time.Duration
		renews   bool
	}{
		{"the host an hour behind, the certificate at 95 % of its life", time.Hour, -95 * time.Second, 5 * time.Second, true},
		{"the host an hour ahead, the certificate fresh", -time.Hour, -time.Minute, 59 * time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			agentEnd, hubConn := net.Pipe()
			t.Cleanup(func() { _ = agentEnd.Close(); _ = hubConn.Close() })
			skews := make(chan time.Duration, 1)
			s := New(Options{Hub: "https://hub.example", ClockSkew: func(d time.Duration) { skews <- d }},
				state.Store{Dir: t.TempDir()}, logr.Discard())
			s.updates = make(chan Update, 8)
			ctrl := &control{conn: agentEnd}
			ctrl.version.Store(wire.MinProtocol)
			hubNow := time.Now().Add(c.hubAhead)
			rot := newRotator(s, ctrl, leafValid(t, hubNow.Add(c.from), hubNow.Add(c.to)))
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			go func() { _ = s.read(ctx, ctrl, rot) }()

			hub := hubEnd{t: t, conn: hubConn}
			hub.write(2, &wire.Welcome{HubVersion: "v0.3.0", Time: &metav1.MicroTime{Time: hubNow}})
			if skew := <-skews; (skew + c.hubAhead).Abs() > 5*time.Second {
				t.Errorf("the agent measured its clock %s ahead, want %s", skew, -c.hubAhead)
			}
			_ = hubConn.SetReadDeadline(time.Now().Add(3 * time.Second))
			frame, err := wire.ReadFrame(hubConn, wire.MaxFrameSize)
			switch {
			case c.renews && err != nil:
				t.Fatalf("no certificate request from a host whose certificate is at 95 %% of its life by the hub's clock: %v", err)
			case c.renews:
				if msg, _, err := wire.DecodeVersion(frame); err != nil {
					t.Fatal(err)
				} else if _, ok := msg.(*wire.CertificateRequest); !ok {
					t.Fatalf("the agent sent %T, want a CertificateRequest", msg)
				}
			case err == nil:
				msg, _, _ := wire.DecodeVersion(frame)
				t.Fatalf("the agent sent %T for a certificate a minute old by the hub's clock", msg)
			case !errors.Is(err, os.ErrDeadlineExceeded):
				t.Fatal(err)
			}
		})
	}
}

// leafValid is a certificate valid from notBefore to notAfter.
func leafValid(t *testing.T, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	ca, err := pki.NewCA("hub", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(servingCert(t, ca, notBefore, notAfter).Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}
