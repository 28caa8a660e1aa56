package edgecluster

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A cluster scoped to its own site offers only that site's zones: a zone
// where none of its hosts are is never a failure domain KCP could pick.
func TestFailureDomainsFollowHostSelector(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := infrav1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	host := func(name, site, zone string) client.Object {
		return &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Labels: map[string]string{"site": site, infrav1.ZoneLabel: zone}}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		host("a1", "store-a", "a-rack-1"), host("a2", "store-a", "a-rack-2"),
		host("b1", "store-b", "b-rack-1"),
		&infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "other-ns", Namespace: "elsewhere",
			Labels: map[string]string{"site": "store-a", infrav1.ZoneLabel: "far"}}},
	).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}

	for _, tc := range []struct {
		name     string
		selector *metav1.LabelSelector
		want     []string
	}{
		{"no selector: every zone in the namespace", nil, []string{"a-rack-1", "a-rack-2", "b-rack-1"}},
		{"own site only", &metav1.LabelSelector{MatchLabels: map[string]string{"site": "store-a"}}, []string{"a-rack-1", "a-rack-2"}},
		{"no matching host", &metav1.LabelSelector{MatchLabels: map[string]string{"site": "store-z"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ec := &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"},
				Spec: infrav1.EdgeClusterSpec{HostSelector: tc.selector}}
			if err := r.reconcileFailureDomains(context.Background(), &scope{edgeCluster: ec}); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, fd := range ec.Status.FailureDomains {
				got = append(got, fd.Name)
				if fd.ControlPlane == nil || !*fd.ControlPlane {
					t.Errorf("failure domain %s not offered to the control plane", fd.Name)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("failure domains %v, want %v", got, tc.want)
			}
		})
	}
}
