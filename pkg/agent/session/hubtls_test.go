package session

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/pki"
)

// servingCert is a serving certificate for 127.0.0.1 from ca, valid from
// notBefore to notAfter.
func servingCert(t *testing.T, ca *pki.CA, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "fleet-hub"},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// An agent whose clock is an hour behind the hub's still reaches a hub
// replica that has just started (its serving certificate is not yet valid
// by the agent's clock); a certificate expired by the agent's clock, one
// from another CA, or one for another name, is refused before anything
// is sent.
func TestTheHubIsReachedByAnAgentWhoseClockIsBehind(t *testing.T) {
	ca, keyPEM, certPEM := enrolledHost(t)
	other, err := pki.NewCA("other", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, c := range []struct {
		name    string
		serving tls.Certificate
		reached bool
	}{
		{"issued an hour ahead of the agent's clock", servingCert(t, ca, now.Add(time.Hour), now.Add(48*time.Hour)), true},
		{"valid", servingCert(t, ca, now.Add(-time.Minute), now.Add(time.Hour)), true},
		{"expired", servingCert(t, ca, now.Add(-2*time.Hour), now.Add(-time.Hour)), false},
		{"from another CA", servingCert(t, other, now.Add(-time.Minute), now.Add(time.Hour)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var served atomic.Bool
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				served.Store(true)
				http.Error(w, "not a hub", http.StatusServiceUnavailable)
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{c.serving}, MinVersion: tls.VersionTLS12}
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.StartTLS()
			defer srv.Close()
			hub := srv.URL
			s := New(Options{Hub: hub, MaxBackoff: time.Minute}, state.Store{Dir: t.TempDir()}, logr.Discard())
			if err := s.store.SaveIdentity(state.Identity{Hub: hub, Namespace: "stores", Host: "store-1", UID: "uid-1"}, ca.CertPEM, keyPEM, certPEM); err != nil {
				t.Fatal(err)
			}
			creds, err := s.credentials(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.dial(context.Background(), creds)
			if err == nil {
				t.Fatal("a server that is no hub was dialled without an error")
			}
			if served.Load() != c.reached || strings.Contains(err.Error(), "certificate") == c.reached {
				t.Fatalf("reached %v, error %v", served.Load(), err)
			}
			if _, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: hubTLS(creds.pool, "https://localhost:1")}}).Get(hub); err == nil ||
				!strings.Contains(err.Error(), "certificate") {
				t.Fatalf("a certificate for 127.0.0.1 was taken for localhost: %v", err)
			}
		})
	}
}
