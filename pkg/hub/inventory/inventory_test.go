package inventory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func host(name string, lbls map[string]string) infrav1.EdgeHost {
	return infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbls, Generation: 1, ResourceVersion: "1"}}
}

func TestCandidatesFilterAndSpread(t *testing.T) {
	deleting := host("deleting", map[string]string{"pool": "a"})
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"x"}
	claimed := host("claimed", map[string]string{"pool": "a"})
	claimed.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "other", UID: "o"}
	hosts := []infrav1.EdgeHost{
		host("a1", map[string]string{"pool": "a", infrav1.ZoneLabel: "z1"}),
		host("a2", map[string]string{"pool": "a", infrav1.ZoneLabel: "z2"}),
		host("a3", map[string]string{"pool": "a", infrav1.ZoneLabel: "z1"}),
		host("b1", map[string]string{"pool": "b", infrav1.ZoneLabel: "z1"}),
		deleting, claimed,
	}
	sel := labels.SelectorFromSet(labels.Set{"pool": "a"})
	m := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"}}

	got := names(Candidates(hosts, Request{Machine: m, Selector: sel}))
	if len(got) != 3 || !sameSet(got, []string{"a1", "a2", "a3"}) {
		t.Fatalf("candidates %v, want a1 a2 a3 in some order", got)
	}
	if again := names(Candidates(hosts, Request{Machine: m, Selector: sel})); !equal(got, again) {
		t.Errorf("order is not deterministic: %v then %v", got, again)
	}
	if z := names(Candidates(hosts, Request{Machine: m, Selector: sel, Zone: "z1"})); !sameSet(z, []string{"a1", "a3"}) {
		t.Errorf("zone z1 candidates %v", z)
	}
	if none := Candidates(hosts, Request{Machine: m, Selector: labels.SelectorFromSet(labels.Set{"pool": "c"})}); none != nil {
		t.Errorf("want no candidates, got %v", names(none))
	}
	// Different machines start at different hosts, so racing claimers spread.
	starts := map[string]bool{}
	for _, n := range []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"} {
		c := Candidates(hosts, Request{Machine: &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "ns"}}, Selector: sel})
		starts[c[0].Name] = true
	}
	if len(starts) < 2 {
		t.Errorf("every machine starts at the same host: %v", starts)
	}
	// Two hub replicas whose views of the pool differ by a host (claimed
	// in between their reads) still send one machine to the same first
	// host, where the second claim meets the first as a Conflict.
	var pool []infrav1.EdgeHost
	for i := range 10 {
		pool = append(pool, host(fmt.Sprintf("p%d", i), nil))
	}
	for _, n := range []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"} {
		req := Request{Machine: &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "ns"}}}
		first := Candidates(pool, req)[0].Name
		for i := range pool {
			if pool[i].Name == first {
				continue
			}
			fewer := append(slices.Clone(pool[:i]), pool[i+1:]...)
			if got := Candidates(fewer, req)[0].Name; got != first {
				t.Errorf("machine %s starts at %s, but at %s once %s is gone", n, first, got, pool[i].Name)
			}
		}
	}
}

func TestClaimRetriesAFreeHostAndSkipsATakenOne(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h1, h2 := host("h1", nil), host("h2", nil)
	m := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns", UID: "mu"}}
	gr := schema.GroupResource{Group: infrav1.GroupVersion.Group, Resource: "edgehosts"}

	req := Request{Machine: m, BootstrapDataSecretName: "boot"}
	// h1 was taken by someone else: on the conflict it is read again, seen
	// held, and skipped.
	takenH1 := h1.DeepCopy()
	takenH1.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "other", UID: "ou"}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(takenH1, h2.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if o.GetName() == "h1" {
				return apierrors.NewConflict(gr, "h1", errors.New("taken"))
			}
			return c.Update(ctx, o, opts...)
		}}).Build()
	got, err := Claim(context.Background(), c, c, []*infrav1.EdgeHost{&h1, &h2}, req)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if got.Name != "h2" || got.Spec.ClaimRef.UID != "mu" || got.Spec.ClaimRef.BootstrapDataSecretName != "boot" ||
		got.Labels[infrav1.ClaimedByLabel] != "m" {
		t.Errorf("claimed %s with %+v labels %v", got.Name, got.Spec.ClaimRef, got.Labels)
	}

	// h1 changed without being taken (its agent wrote status): the claim
	// is made on the fresh copy, not given up. A machine that gave up here
	// would wait for an event that never comes: a free host staying free
	// wakes no waiting machine.
	conflicts := 0
	changed := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h1.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			if conflicts == 0 {
				conflicts++
				return apierrors.NewConflict(gr, "h1", errors.New("status changed"))
			}
			return c.Update(ctx, o, opts...)
		}}).Build()
	if got, err := Claim(context.Background(), changed, changed, []*infrav1.EdgeHost{&h1}, req); err != nil || got.Name != "h1" {
		t.Errorf("a host changed but still free: claimed %v, err %v; want h1", got, err)
	}

	// A host still free that conflicts on every write is not "no host":
	// the caller gets the conflict and requeues.
	attempts := 0
	allConflict := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h1.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			attempts++
			return apierrors.NewConflict(gr, "h1", errors.New("busy"))
		}}).Build()
	if _, err := Claim(context.Background(), allConflict, allConflict, []*infrav1.EdgeHost{&h1}, req); !apierrors.IsConflict(err) || errors.Is(err, ErrNoHost) {
		t.Errorf("all conflicts on a free host: err %v, want a Conflict", err)
	}
	if attempts != claimAttempts {
		t.Errorf("%d attempts on a host that always conflicts, want %d", attempts, claimAttempts)
	}

	// Taken by this same machine (another hub replica reconciling it at
	// the same moment): that is the claim, and h2 is left alone.
	mine := h1.DeepCopy()
	mine.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "m", UID: "mu"}
	updates := 0
	sameMachine := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mine, h2.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			updates++
			if o.GetName() == "h1" {
				return apierrors.NewConflict(gr, "h1", errors.New("claimed by the other replica"))
			}
			return c.Update(ctx, o, opts...)
		}}).Build()
	if got, err := Claim(context.Background(), sameMachine, sameMachine, []*infrav1.EdgeHost{&h1, &h2}, req); err != nil || got.Name != "h1" || updates != 1 {
		t.Errorf("a host this machine claimed meanwhile: got %v, err %v, %d updates; want h1 and no second claim", got, err, updates)
	}

	// Taken by another machine on every try: no host.
	taken := fake.NewClientBuilder().WithScheme(scheme).WithObjects(takenH1.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return apierrors.NewConflict(gr, "h1", errors.New("taken"))
		}}).Build()
	if _, err := Claim(context.Background(), taken, taken, []*infrav1.EdgeHost{&h1}, req); !errors.Is(err, ErrNoHost) {
		t.Errorf("host taken by another: err %v, want ErrNoHost", err)
	}

	boom := errors.New("etcd is down")
	failing := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h1.DeepCopy()).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return boom
		}}).Build()
	if _, err := Claim(context.Background(), failing, failing, []*infrav1.EdgeHost{&h1}, req); !errors.Is(err, boom) {
		t.Errorf("server error: err %v, want it wrapped", err)
	}
}

func TestReleaseOnlyOwnClaim(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := host("h", map[string]string{infrav1.ClaimedByLabel: "m"})
	h.Spec.ClaimRef = &infrav1.HostClaimReference{Name: "m", UID: "mine"}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(h.DeepCopy()).Build()
	stored := &infrav1.EdgeHost{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&h), stored); err != nil {
		t.Fatal(err)
	}
	if err := Release(context.Background(), c, stored, "someone-else"); err != nil || stored.Spec.ClaimRef == nil {
		t.Fatalf("releasing another machine's claim: err %v claim %v", err, stored.Spec.ClaimRef)
	}
	if err := Release(context.Background(), c, stored, "mine"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(&h), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Spec.ClaimRef != nil || stored.Labels[infrav1.ClaimedByLabel] != "" {
		t.Errorf("after release: claim %v labels %v", stored.Spec.ClaimRef, stored.Labels)
	}
}

func names(hs []*infrav1.EdgeHost) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return len(a) == len(b)
}

// The Machine's version goes into the claim only for a host that has it
// staged: its agent installs it before the bootstrap.
func TestClaimNamesAStagedVersion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	staged, bare := host("staged", nil), host("bare", nil)
	staged.Status.Facts.KubernetesVersions = []string{"v1.36.3"}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(staged.DeepCopy(), bare.DeepCopy()).Build()
	for _, tc := range []struct {
		h    *infrav1.EdgeHost
		want string
	}{{&staged, "v1.36.3"}, {&bare, ""}} {
		m := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "m-" + tc.h.Name, Namespace: "ns", UID: types.UID("u-" + tc.h.Name)}}
		got, err := Claim(context.Background(), c, c, []*infrav1.EdgeHost{tc.h}, Request{Machine: m, KubernetesVersion: "v1.36.3"})
		if err != nil || got.Spec.ClaimRef.KubernetesVersion != tc.want {
			t.Errorf("claim of %s: %v, version %q, want %q", tc.h.Name, err, got.Spec.ClaimRef.KubernetesVersion, tc.want)
		}
	}
}
