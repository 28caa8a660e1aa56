package identity

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/edgefleet/fleet/pkg/pki"
)

// ServingCert issues a replica's serving certificate from CA, and again
// when it nears its end. Use Get as a tls.Config's GetCertificate.
type ServingCert struct {
	CA       *pki.CA
	DNSNames []string
	IPs      []net.IP
	// Validity of each certificate; a new one is issued in its last
	// twelfth.
	Validity time.Duration
	// Name says what serves with it, for errors.
	Name string

	mu   sync.Mutex
	cert *tls.Certificate
	leaf *x509.Certificate
}

// Get returns the current certificate, issuing one first if needed.
func (s *ServingCert) Get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leaf != nil && time.Until(s.leaf.NotAfter) > s.Validity/12 {
		return s.cert, nil
	}
	cert, err := s.CA.ServingCertificate(s.DNSNames, s.IPs, s.Validity)
	if err != nil {
		return nil, fmt.Errorf("issuing the serving certificate of %s: %w", s.Name, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, err
	}
	s.cert, s.leaf = &cert, leaf
	return s.cert, nil
}
