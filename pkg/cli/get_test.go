package cli_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// printerColumns reads a CRD's additionalPrinterColumns for one version
// from the API server.
func printerColumns(t *testing.T, crd, version string) []apiextensionsv1.CustomResourceColumnDefinition {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: crd}, u); err != nil {
		t.Fatal(err)
	}
	def := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, def); err != nil {
		t.Fatal(err)
	}
	for _, v := range def.Spec.Versions {
		if v.Name == version {
			return v.AdditionalPrinterColumns
		}
	}
	t.Fatalf("CRD %s has no version %s", crd, version)
	return nil
}

// The get tables have exactly the columns of the CRDs' printer columns, in
// their order, the wide ones with -o wide: one list, the one `kubectl get`
// shows too. A table built in the plugin would drift from it and fail here.
func TestGetTablesAreTheCRDColumns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "columns")
	for _, obj := range []client.Object{
		&infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h"}},
		&infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m"}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "c"}, Spec: clusterv1.ClusterSpec{Paused: ptr.To(true),
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "c"}}},
	} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	columnGap := regexp.MustCompile(`\s{2,}`)
	for _, tc := range []struct{ kind, crd, version string }{
		{"hosts", "edgehosts.infrastructure.cluster.x-k8s.io", infrav1.GroupVersion.Version},
		{"machines", "edgemachines.infrastructure.cluster.x-k8s.io", infrav1.GroupVersion.Version},
		{"clusters", "clusters.cluster.x-k8s.io", clusterv1.GroupVersion.Version},
	} {
		narrow, wide := []string{"NAME"}, []string{"NAME"}
		for _, c := range printerColumns(t, tc.crd, tc.version) {
			if c.Priority == 0 {
				narrow = append(narrow, strings.ToUpper(c.Name))
			}
			wide = append(wide, strings.ToUpper(c.Name))
		}
		wide = append(wide, "LABELS")
		for _, output := range []string{"", "wide"} {
			want := narrow
			if output == "wide" {
				want = wide
			}
			out, _, err := fleet(t, "get", tc.kind, "-n", ns, "-o", output)
			if err != nil {
				t.Fatalf("get %s -o %q: %v", tc.kind, output, err)
			}
			header := columnGap.Split(strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]), -1)
			if !slices.Equal(header, want) {
				t.Errorf("get %s -o %q columns\n%q\nwant the CRD's\n%q", tc.kind, output, header, want)
			}
		}
	}
}
