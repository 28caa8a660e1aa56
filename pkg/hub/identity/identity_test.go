package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/pki"
)

// hostCert signs a client certificate for ns/name (uid in its URI when
// set) and returns it with its key ID.
func hostCert(t *testing.T, ca *pki.CA, id pki.Identity) (*x509.Certificate, string) {
	t.Helper()
	_, csr, err := pki.NewKeyAndCSR(id.Name)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignClient(csr, id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert, pki.CertKeyID(cert)
}

func request(cert *x509.Certificate) *http.Request {
	r, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://hub/v1/connect", nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}}
	return r
}

func authority(t *testing.T, objs ...client.Object) (*Authority, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = infrav1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	ca, err := pki.NewCA("test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &Authority{Client: c, APIReader: c, CA: ca, ClientCertValidity: time.Hour, RotationOverlap: time.Minute, Log: logr.Discard()}, c
}

func edgeHost(uid types.UID, key string) *infrav1.EdgeHost {
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "stores", Name: "store-7", UID: uid}}
	if key != "" {
		h.Annotations = map[string]string{infrav1.ClientKeyAnnotation: key}
	}
	return h
}

// What binds a certificate to its EdgeHost is the CA, the name and the
// recorded key: a restored EdgeHost (new uid, same annotations) takes the
// certificate issued for the one before, and the session is bound to the
// restored incarnation; a missing EdgeHost is unknown, not revoked; another
// key is refused; a certificate without a uid is accepted.
func TestBindingSurvivesARestore(t *testing.T) {
	a, c := authority(t)
	cert, key := hostCert(t, a.CA, pki.Identity{Namespace: "stores", Name: "store-7", UID: "uid-before"})

	if _, err := a.Authenticate(request(cert)); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("no EdgeHost: %v, want ErrUnknownHost", err)
	}
	if err := c.Create(context.Background(), edgeHost("uid-after", key)); err != nil {
		t.Fatal(err)
	}
	restored := &infrav1.EdgeHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "stores", Name: "store-7"}, restored); err != nil {
		t.Fatal(err)
	}
	p, err := a.Authenticate(request(cert))
	if err != nil {
		t.Fatalf("restored EdgeHost refused the certificate: %v", err)
	}
	if restored.UID != "uid-after" || p.ID.UID != "uid-after" || Trust(restored, p) != nil {
		t.Errorf("session bound to uid %q, want the restored %q", p.ID.UID, restored.UID)
	}
	other, _ := hostCert(t, a.CA, pki.Identity{Namespace: "stores", Name: "store-7", UID: string(restored.UID)})
	if _, err := a.Authenticate(request(other)); !errors.Is(err, ErrReplaced) {
		t.Errorf("another key under the name: %v, want ErrReplaced", err)
	}
	noUID, noUIDKey := hostCert(t, a.CA, pki.Identity{Namespace: "stores", Name: "store-7"})
	restored.Annotations[infrav1.ClientKeyAnnotation] = noUIDKey
	if err := c.Update(context.Background(), restored); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(request(noUID)); err != nil {
		t.Errorf("a certificate without a uid: %v", err)
	}
}

// A host enrolled before keys were recorded is bound by its uid once: its
// first session records the key, which binds it from then on.
func TestAHostWithoutARecordedKeyIsBoundByUIDOnce(t *testing.T) {
	a, c := authority(t, edgeHost("uid-1", ""))
	cert, key := hostCert(t, a.CA, pki.Identity{Namespace: "stores", Name: "store-7", UID: "uid-1"})
	stranger, _ := hostCert(t, a.CA, pki.Identity{Namespace: "stores", Name: "store-7", UID: "uid-0"})
	if _, err := a.Authenticate(request(stranger)); !errors.Is(err, ErrRevoked) {
		t.Errorf("a certificate of an earlier host of the name: %v, want ErrRevoked", err)
	}
	if _, err := a.Authenticate(request(cert)); err != nil {
		t.Fatal(err)
	}
	h := &infrav1.EdgeHost{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "stores", Name: "store-7"}, h); err != nil {
		t.Fatal(err)
	}
	if h.Annotations[infrav1.ClientKeyAnnotation] != key {
		t.Errorf("key not recorded: annotations %v", h.Annotations)
	}
}
