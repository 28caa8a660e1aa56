package enrollment

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/pki"
)

// A token's usage counter that keeps losing the race (a crowd of hosts
// enrolling with one token) turns the host away for a moment (503, which
// agents honour without growing their back-off), never with a 500.
func TestEnrollOnAContendedTokenIsBusyNotAnError(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	base := fake.NewClientBuilder().WithScheme(scheme).Build()
	token, _, err := CreateToken(ctx, base, "fleet-system", enrolltoken.Options{TTL: time.Hour, HostNamespace: "site-a"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The fake client keeps StringData as written; the API server would
	// have merged it into Data.
	secrets := &corev1.SecretList{}
	if err := base.List(ctx, secrets); err != nil || len(secrets.Items) != 1 {
		t.Fatalf("token Secret: %v (%d)", err, len(secrets.Items))
	}
	sec := &secrets.Items[0]
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	for k, v := range sec.StringData {
		sec.Data[k] = []byte(v)
	}
	sec.StringData = nil
	if err := base.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	updates := 0
	contended := interceptor.NewClient(base, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			return apierrors.NewConflict(schema.GroupResource{Resource: "secrets"}, obj.GetName(), nil)
		},
	})
	s := &Enroller{client: contended, apiReader: base, opts: EnrollerOptions{HubNamespace: "fleet-system"}}
	_, csr, err := pki.NewKeyAndCSR("store-1")
	if err != nil {
		t.Fatal(err)
	}
	_, status, code, err := s.enroll(ctx, &wire.EnrollRequest{Token: token, CSR: csr,
		Facts: infrav1.HostFacts{Hostname: "store-1", MachineID: "0123456789abcdef0123456789abcdef"}})
	if status != http.StatusServiceUnavailable || code != "Busy" || err == nil || !strings.Contains(err.Error(), "many hosts at once") {
		t.Fatalf("status %d code %q err %v", status, code, err)
	}
	if updates != 4 {
		t.Errorf("%d tries of the usage counter, want 4", updates)
	}
}

// Enrollments beyond the concurrency limit are turned away at once, before
// any work, with a Retry-After the agent honours; an admitted one gives its
// place back however it ends.
func TestEnrollmentsBeyondTheLimitAreBusy(t *testing.T) {
	s := NewEnroller(nil, nil, nil, logr.Discard(), EnrollerOptions{HubNamespace: "fleet-system", MaxConcurrent: 1, Rate: rate.Inf, Burst: 1})
	s.places.Take(context.Background(), 0) // one in progress
	body := `{"token":"abcdef.0123456789abcdef","csr":"bm90IGEgY3Ny","facts":{"hostname":"kiosk","machineID":"0123456789abcdef0123456789abcdef"}}`
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, wire.PathEnroll, strings.NewReader(body)))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "5" || !strings.Contains(rec.Body.String(), "Busy") {
		t.Fatalf("over the limit: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	s.places.Release()
	// Admitted; its CSR is no CSR, so it ends at once with 400.
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, wire.PathEnroll, strings.NewReader(body)))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "csr refused") {
		t.Fatalf("admitted request with a bad CSR: %d %s, want 400 csr refused", rec.Code, rec.Body)
	}
	if s.places.InUse() != 0 {
		t.Error("an enrollment that ended kept its place")
	}
}

// An enrollment beyond the limit waits in line for a place (EnrollerOptions.Wait)
// instead of being turned away at once — a retry would cost the hub two
// more TLS handshakes — and goes ahead when one frees; one that waits in
// vain is turned away with Retry-After.
func TestEnrollmentWaitsForAPlace(t *testing.T) {
	s := NewEnroller(nil, nil, nil, logr.Discard(), EnrollerOptions{HubNamespace: "fleet-system", MaxConcurrent: 1, Rate: rate.Inf, Burst: 1,
		Wait: time.Minute})
	body := `{"token":"abcdef.0123456789abcdef","csr":"bm90IGEgY3Ny","facts":{"hostname":"kiosk","machineID":"0123456789abcdef0123456789abcdef"}}`
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, wire.PathEnroll, strings.NewReader(body)))
		return rec
	}
	s.places.Take(context.Background(), 0) // one in progress
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve() }()
	select {
	case rec := <-done:
		t.Fatalf("answered %d while no place was free; want it to wait", rec.Code)
	case <-time.After(300 * time.Millisecond):
	}
	s.places.Release() // the one in progress ends
	// Admitted; its CSR is no CSR, so it ends with 400.
	if rec := <-done; rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "csr refused") {
		t.Fatalf("the waiting enrollment: %d %s, want 400 csr refused", rec.Code, rec.Body)
	}

	s.opts.Wait = 100 * time.Millisecond
	s.places.Take(context.Background(), 0)
	if rec := serve(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "5" {
		t.Fatalf("waited in vain: %d Retry-After %q, want 503 and 5", rec.Code, rec.Header().Get("Retry-After"))
	}
}
