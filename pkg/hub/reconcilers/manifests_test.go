package reconcilers_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests/default builds with kustomize and every object in it is accepted
// by the API server (a server-side dry-run apply), so `kubectl apply -k
// manifests/default` is known to work.
func TestDeployManifestsApply(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	root := filepath.Join("..", "..", "..")
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).
		Run(filesys.MakeFsOnDisk(), filepath.Join(root, "manifests", "default"))
	if err != nil {
		t.Fatalf("kustomize build manifests/default: %v", err)
	}
	kinds := map[string]int{}
	var deployment *unstructured.Unstructured
	var objs []*unstructured.Unstructured
	for _, res := range resMap.Resources() {
		b, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatal(err)
		}
		kinds[u.GetKind()]++
		switch u.GetKind() {
		case "Deployment":
			deployment = u.DeepCopy()
		case "Namespace":
			// Namespaced objects can only be dry-run into a namespace that
			// exists, so this one is created for real.
			if err := env.Client.Apply(w.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("manifests-test"), client.ForceOwnership); err != nil {
				t.Fatalf("Namespace %s rejected: %v", u.GetName(), err)
			}
			continue
		case "CustomResourceDefinition":
			continue // installed already by the harness from the same files
		}
		objs = append(objs, u)
	}
	for _, u := range objs {
		if err := env.Client.Apply(w.ctx, client.ApplyConfigurationFromUnstructured(u), client.DryRunAll,
			client.FieldOwner("manifests-test"), client.ForceOwnership); err != nil {
			t.Errorf("%s %s rejected by the API server: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for kind, n := range map[string]int{"CustomResourceDefinition": 8, "Deployment": 1, "ServiceAccount": 1, "Namespace": 1} {
		if kinds[kind] != n {
			t.Errorf("%d %s objects, want %d (all kinds: %v)", kinds[kind], kind, n, kinds)
		}
	}
	if deployment == nil {
		t.Fatal("no Deployment")
	}
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 || containers[0].(map[string]any)["name"] != "manager" {
		t.Errorf("clusterctl needs one container named manager, got %v", containers)
	}
}

// metadata.yaml is valid clusterctl metadata whose contract matches the
// label on the CRDs.
func TestClusterctlMetadata(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "metadata.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	md := &v1alpha3.Metadata{}
	if err := yaml.UnmarshalStrict(b, md); err != nil {
		t.Fatalf("metadata.yaml: %v", err)
	}
	if md.Kind != "Metadata" || !strings.HasPrefix(md.APIVersion, "clusterctl.cluster.x-k8s.io/") || len(md.ReleaseSeries) == 0 {
		t.Fatalf("metadata.yaml is not clusterctl metadata: %+v", md)
	}
	if rs := md.GetReleaseSeriesForVersion(mustSemver(t, "0.1.0")); rs == nil || rs.Contract != "v1beta2" {
		t.Errorf("release series for 0.1.0 is %+v, want contract v1beta2", rs)
	}
}

func mustSemver(t *testing.T, v string) *version.Version {
	t.Helper()
	sv, err := version.ParseSemantic(v)
	if err != nil {
		t.Fatal(err)
	}
	return sv
}
