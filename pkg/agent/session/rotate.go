package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
)

// rotator renews the client certificate over the session at a jittered
// 70–90 % of its lifetime, without dropping the session. The lifetime is
// the hub's, and so is the clock it is timed by: a host whose clock is
// behind would otherwise let its certificate expire, one ahead would
// renew it again as soon as it got it.
type rotator struct {
	src  *Source
	ctrl *control
	leaf *x509.Certificate

	mu         sync.Mutex
	pendingKey []byte
	got        chan struct{}
}

func newRotator(src *Source, ctrl *control, leaf *x509.Certificate) *rotator {
	return &rotator{src: src, ctrl: ctrl, leaf: leaf, got: make(chan struct{}, 1)}
}

func (r *rotator) run(ctx context.Context) {
	for {
		r.mu.Lock()
		leaf := r.leaf
		r.mu.Unlock()
		deadline := rotationDeadline(leaf.NotBefore, leaf.NotAfter)
		select {
		case <-ctx.Done():
			return
		case <-time.After(deadline.Sub(r.src.hubNow())):
		}
		// The same key until a certificate for it arrives: the hub may
		// have recorded it already, with the answer lost.
		keyPEM, err := r.src.store.RotationKey()
		var csrPEM []byte
		if err == nil {
			csrPEM, err = pki.CSRForKey(keyPEM, leaf.Subject.CommonName)
		}
		if err != nil {
			r.src.log.Error(err, "Preparing the key for certificate rotation; trying again in a minute")
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Minute):
			}
			continue
		}
		r.mu.Lock()
		r.pendingKey = keyPEM
		r.mu.Unlock()
		if err := r.ctrl.send(&wire.CertificateRequest{CSR: csrPEM}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.got:
		case <-time.After(30 * time.Second):
			// No answer: try again at a new jittered point, or on reconnect.
		}
	}
}

func (r *rotator) received(c *wire.Certificate) {
	r.mu.Lock()
	key := r.pendingKey
	r.mu.Unlock()
	if key == nil {
		r.src.log.Info("Ignoring a certificate that was not asked for")
		return
	}
	if _, err := tls.X509KeyPair(c.Certificate, key); err != nil {
		// A late answer to an earlier request: the one for the pending
		// key may still come.
		r.src.log.Error(err, "Hub sent a certificate that does not match the new key")
		return
	}
	r.mu.Lock()
	r.pendingKey = nil
	r.mu.Unlock()
	leaf, err := pki.ParseCertPEM(c.Certificate)
	if err != nil {
		return
	}
	if err := r.src.store.SaveCredentials(key, c.Certificate); err != nil {
		r.src.log.Error(err, "Saving rotated certificate")
		return
	}
	if err := r.src.store.ForgetRotationKey(); err != nil {
		r.src.log.Error(err, "Removing the rotation key that is now the current one")
	}
	r.mu.Lock()
	r.leaf = leaf
	r.mu.Unlock()
	r.src.rotations.Add(1)
	r.src.log.Info("Rotated client certificate", "notAfter", leaf.NotAfter)
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// rotationDeadline is a jittered 70–90 % of the certificate's lifetime.
func rotationDeadline(notBefore, notAfter time.Time) time.Time {
	total := notAfter.Sub(notBefore)
	frac := 0.7 + 0.2*rand.Float64()
	return notBefore.Add(time.Duration(float64(total) * frac))
}
