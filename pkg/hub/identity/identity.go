package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Why a host's certificate opens no session.
var (
	ErrRevoked  = errors.New("host identity revoked: its EdgeHost was deleted; enroll again")
	ErrDeleting = fmt.Errorf("%w (it is being deleted)", ErrRevoked)
	ErrReplaced = errors.New("this certificate was replaced by a newer one (a rotation): only the host's current certificate opens sessions")
	// ErrUnknownHost: no EdgeHost has the certificate's name. The hub cannot
	// tell a host deleted while its agent was away from one a restore from
	// backup has not brought back (yet), so the agent is told to keep its
	// identity and retry, never to enroll afresh or reset.
	ErrUnknownHost = errors.New("the hub has no EdgeHost of this name: if it was restored from a backup without it, restore the EdgeHost; the agent keeps its identity and retries")
	// ErrMoved: clusterctl move took the EdgeHost to another hub cluster.
	// Like an unknown host, the agent keeps its identity and workload and
	// retries until its gateway address leads to the new hub.
	ErrMoved = fmt.Errorf("%w (its EdgeHost moved to another hub cluster with clusterctl move: point the gateway address at the new hub)", ErrUnknownHost)
)

// Peer is who a verified client certificate speaks for.
type Peer struct {
	ID pki.Identity
	// Key names the certificate's public key; NotAfter is its expiry.
	Key      string
	NotAfter time.Time
}

// Authority authenticates hosts and signs their certificates.
type Authority struct {
	// Client reads EdgeHosts from the informer cache and writes through
	// the API server; APIReader reads past the cache.
	Client    client.Client
	APIReader client.Reader
	CA        *pki.CA
	// ClientCertValidity is the lifetime of host certificates.
	ClientCertValidity time.Duration
	// RotationOverlap is how long a host's previous certificate still
	// opens sessions after a rotation, unless the new one is used first.
	RotationOverlap time.Duration
	Log             logr.Logger
}

// Authenticate maps the verified client certificate of r to a live
// EdgeHost. What binds the two is restorable: the hub CA that signed the
// certificate, the EdgeHost's namespace and name, and the client key
// recorded on it (ClientKeyAnnotation, or the previous one during a
// rotation's overlap), never the EdgeHost's uid, which a restore from
// backup changes. A host being deleted is revoked; a name the hub does not
// know is ErrUnknownHost. The Peer returned carries the uid of the EdgeHost
// it was bound to: the session is for that incarnation (Trust).
func (a *Authority) Authenticate(r *http.Request) (Peer, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return Peer{}, errors.New("a client certificate from the hub CA is required; enroll first")
	}
	leaf := r.TLS.PeerCertificates[0]
	id, err := pki.IdentityFromCert(leaf)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{ID: id, Key: pki.CertKeyID(leaf), NotAfter: leaf.NotAfter}
	key := client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
	host := &infrav1.EdgeHost{}
	err = a.Client.Get(r.Context(), key, host)
	if err == nil && bind(host, p) != nil || apierrors.IsNotFound(err) {
		// The cache may not have seen a host enrolled, restored or
		// rotated a moment ago: ask the API server before refusing.
		err = a.APIReader.Get(r.Context(), key, host)
	}
	if apierrors.IsNotFound(err) {
		return Peer{}, ErrUnknownHost
	}
	if err != nil {
		return Peer{}, fmt.Errorf("looking up EdgeHost %s: %w", id, err)
	}
	if err := bind(host, p); err != nil {
		return Peer{}, err
	}
	p.ID.UID = string(host.UID)
	switch cur := host.Annotations[infrav1.ClientKeyAnnotation]; {
	case cur == "":
		// Enrolled before keys were recorded (bind checked the uid): record
		// it now, so the binding survives a restore from then on.
		if err := a.SetClientKeys(r.Context(), host, p.Key, ""); err != nil {
			a.Log.Error(err, "Recording the client key of a host enrolled before keys were recorded", "EdgeHost", id.String())
		}
	case p.Key == cur && host.Annotations[infrav1.PreviousClientKeyAnnotation] != "":
		// The agent uses its new certificate: the old one is retired.
		if err := a.SetClientKeys(r.Context(), host, p.Key, ""); err != nil {
			a.Log.Error(err, "Retiring the previous client key", "EdgeHost", id.String())
		}
	}
	return p, nil
}

// bind says why host does not accept the certificate p at the start of a
// session, or nil. The certificate's uid is ignored once the host records
// its key: a restored EdgeHost has a new uid and the same annotations.
func bind(host *infrav1.EdgeHost, p Peer) error {
	if host.Annotations[infrav1.ClientKeyAnnotation] == "" && string(host.UID) != p.ID.UID {
		// No key to bind by: only the uid tells this host from another
		// that had the name before.
		return ErrRevoked
	}
	bound := p
	bound.ID.UID = string(host.UID)
	return Trust(host, bound)
}

// PeerName is the EdgeHost a request's certificate names, for logs.
func PeerName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	id, err := pki.IdentityFromCert(r.TLS.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.String()
}

// Trust says why host does not accept p, a peer Authenticate bound to an
// EdgeHost, or nil. A host of that name with another uid is another
// incarnation: the one the session was opened for was deleted.
func Trust(host *infrav1.EdgeHost, p Peer) error {
	switch {
	case string(host.UID) != p.ID.UID:
		return ErrRevoked
	case inventory.MovingAway(host):
		return ErrMoved
	case !host.DeletionTimestamp.IsZero():
		// Whatever its agent reports: what the finalizer protects is a
		// separate question from whether the identity is still trusted.
		return ErrDeleting
	}
	cur := host.Annotations[infrav1.ClientKeyAnnotation]
	if cur == "" || p.Key == cur {
		return nil // "": enrolled before keys were recorded; Authenticate records it
	}
	if prev, until, ok := previousKey(host); ok && p.Key == prev && time.Now().Before(until) {
		return nil
	}
	return ErrReplaced
}

// previousKey parses PreviousClientKeyAnnotation: "<key> <RFC 3339 time
// until which it is honoured>".
func previousKey(host *infrav1.EdgeHost) (key string, until time.Time, ok bool) {
	key, at, found := strings.Cut(host.Annotations[infrav1.PreviousClientKeyAnnotation], " ")
	if !found {
		return "", time.Time{}, false
	}
	until, err := time.Parse(time.RFC3339, at)
	return key, until, err == nil
}

// SetClientKeys records the host's current client key, and the previous
// one ("" for none) with the end of its overlap.
func (a *Authority) SetClientKeys(ctx context.Context, host *infrav1.EdgeHost, cur, prev string) error {
	if prev != "" {
		prev += " " + time.Now().Add(a.RotationOverlap).UTC().Format(time.RFC3339)
	}
	want := host.DeepCopy()
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[infrav1.ClientKeyAnnotation] = cur
	if prev == "" {
		delete(want.Annotations, infrav1.PreviousClientKeyAnnotation)
	} else {
		want.Annotations[infrav1.PreviousClientKeyAnnotation] = prev
	}
	// Optimistic: a patch built from a stale copy must not undo a newer
	// rotation (on another replica).
	p := client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})
	if err := a.Client.Patch(ctx, want, p); err != nil {
		return fmt.Errorf("recording the client key of EdgeHost %s/%s: %w", host.Namespace, host.Name, err)
	}
	return nil
}

// Rotation is a certificate signed for a new key of a host.
type Rotation struct {
	Certificate []byte
	// Key names the new certificate's public key.
	Key      string
	NotAfter time.Time
}

// Rotate signs a new client certificate for the host p speaks for and
// records its key as the host's current one before the agent has it. p's
// key stays valid until the new certificate is first used, for
// RotationOverlap at most: long enough for an agent whose answer was lost
// with its session to come back and ask again.
func (a *Authority) Rotate(ctx context.Context, p Peer, csrPEM []byte) (*Rotation, error) {
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	host := &infrav1.EdgeHost{}
	if err := a.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ID.Namespace, Name: p.ID.Name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrRevoked
		}
		return nil, fmt.Errorf("reading EdgeHost %s: %w", p.ID, err)
	}
	if err := Trust(host, p); err != nil {
		return nil, err
	}
	next := pki.KeyID(csr)
	if cur := host.Annotations[infrav1.ClientKeyAnnotation]; cur != "" && p.Key != cur && next != cur {
		// The previous certificate, within its overlap, may only fetch
		// the certificate of the key its rotation recorded (an owner whose
		// answer was lost asks again with that key): rotating anew would
		// replace the owner's new certificate.
		return nil, ErrPreviousKeyRotation
	}
	if host.Annotations[infrav1.ClientKeyAnnotation] != next {
		if err := a.SetClientKeys(ctx, host, next, p.Key); err != nil {
			return nil, errors.New("the hub could not record the new key; retry later")
		}
	}
	cert, err := a.CA.SignClient(csrPEM, p.ID, a.ClientCertValidity)
	if err != nil {
		return nil, err
	}
	return &Rotation{Certificate: cert, Key: next, NotAfter: time.Now().Add(a.ClientCertValidity)}, nil
}

// ErrPreviousKeyRotation refuses a rotation asked with the certificate a
// rotation replaced, for another key than the one that rotation recorded.
var ErrPreviousKeyRotation = errors.New("a certificate that a rotation replaced may only fetch the certificate of the key that rotation recorded")

// Confirm reads the host from the API server and says whether p is still
// trusted: the cache may predate a rotation made on this very session.
func (a *Authority) Confirm(ctx context.Context, p Peer) error {
	host := &infrav1.EdgeHost{}
	if err := a.APIReader.Get(ctx, client.ObjectKey{Namespace: p.ID.Namespace, Name: p.ID.Name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return ErrRevoked
		}
		return err
	}
	return Trust(host, p)
}
