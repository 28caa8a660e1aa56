package session

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/hostclock"
)

// hubTLS is the TLS configuration that reaches the hub: its certificate
// must chain to the pinned CA and name the hub (see verifyHub).
func hubTLS(pool *x509.CertPool, hub string, certs ...tls.Certificate) *tls.Config {
	name := serverName(hub)
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         name,
		Certificates:       certs,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection checks the chain and the name
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyHub(cs.PeerCertificates, pool, name, hostclock.Now())
		},
	}
}

// verifyHub checks that the hub's chain leads to the pinned CA (and
// names name, unless it is empty), as of now — or as of the leaf's
// NotBefore when this host's clock is behind it: an edge box whose clock
// lags (a dead battery, no NTP yet) must not be cut off from a hub
// replica that has just issued its serving certificate. A certificate
// expired by this host's clock is refused.
func verifyHub(chain []*x509.Certificate, pool *x509.CertPool, name string, now time.Time) error {
	if len(chain) == 0 {
		return errors.New("the hub presented no certificate")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	at := now
	if at.Before(leaf.NotBefore) {
		at = leaf.NotBefore
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: name, CurrentTime: at})
	return err
}
