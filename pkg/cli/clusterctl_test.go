package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/hack/release/render"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// clusterctlBinary is the real clusterctl `make test` builds into bin/; a
// run without it is skipped, except in CI.
func clusterctlBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../bin/clusterctl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v: run `make clusterctl`", err)
		}
		t.Skipf("%v: run `make clusterctl`", err)
	}
	return p
}

// decodeObjects reads a YAML stream into JSON-normalised objects, as the
// API server would see them.
func decodeObjects(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				return objs
			}
			t.Fatal(err)
		}
		if len(o) == 0 {
			continue
		}
		unstructured.RemoveNestedField(o, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(o, "status")
		j, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var n map[string]any
		if err := json.Unmarshal(j, &n); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, n)
	}
}

// `clusterctl generate cluster` with each of fleet's templates (the real
// clusterctl, its own variable processing) makes exactly the objects
// `kubectl fleet create cluster` makes for the same choices, and what it
// makes is accepted by the API server and acted on by Cluster API's real
// reconcilers.
func TestClusterctlTemplatesAreCreatesObjects(t *testing.T) {
	clusterctl := clusterctlBinary(t)
	dir := t.TempDir()
	if _, err := render.Write(dir, render.Options{Root: "../..", Tag: "v0.1.0"}); err != nil {
		t.Fatal(err)
	}
	noTaints := filepath.Join(dir, "no-taints.yaml")
	if err := os.WriteFile(noTaints, []byte("initConfiguration:\n  nodeRegistration:\n    taints: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := "clusterctl-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// The topology flavor's class, as clusterctl adds it from the release.
	classObjs, err := clustertemplate.ClassObjects(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range classObjs {
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		flavor, name string
		cp, workers  int
		createFlags  []string
	}{
		{"", "kcp", 3, 2, []string{"--control-plane-machines", "3", "--worker-machines", "2", "--host-selector", "site=store-17"}},
		{"single-host", "one", 1, 0, []string{"--control-plane-machines", "1", "--worker-machines", "0", "--kubeadm-config", noTaints, "--host-selector", "site=store-17"}},
		{"machines", "plain", 1, 2, []string{"--control-plane=machines", "--control-plane-machines", "1", "--worker-machines", "2", "--host-selector", "site=store-17"}},
		{"topology", "topo", 1, 2, []string{"--class", "edge", "--control-plane-machines", "1", "--worker-machines", "2", "--variable", "site=store-17"}},
	} {
		file := "cluster-template.yaml"
		if tc.flavor != "" {
			file = "cluster-template-" + tc.flavor + ".yaml"
		}
		cmd := exec.Command(clusterctl, "generate", "cluster", tc.name, "--from", filepath.Join(dir, file),
			"--kubernetes-version", "v1.36.3", "--control-plane-machine-count", fmt.Sprint(tc.cp),
			"--worker-machine-count", fmt.Sprint(tc.workers), "--target-namespace", ns, "--config", filepath.Join(dir, "clusterctl.yaml"))
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "CLUSTERCTL_DISABLE_VERSIONCHECK=true",
			"EDGE_HOST_SELECTOR={matchLabels: {site: store-17}}", "EDGE_SITE=store-17")
		if err := os.WriteFile(filepath.Join(dir, "clusterctl.yaml"), []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		generated, err := cmd.Output()
		if err != nil {
			t.Fatalf("clusterctl generate cluster --from %s: %v\n%s", file, err, stderr.String())
		}
		created, _, err := fleet(t, append([]string{"create", "cluster", tc.name, "-n", ns, "--kubernetes-version", "v1.36.3",
			"--service-cidr", clustertemplate.DefaultServiceCIDR, "--dry-run=client", "-o", "yaml"}, tc.createFlags...)...)
		if err != nil {
			t.Fatal(err)
		}
		got, want := decodeObjects(t, generated), decodeObjects(t, []byte(created))
		if len(got) != len(want) {
			t.Fatalf("%s: clusterctl made %d objects, create %d", file, len(got), len(want))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				g, _ := json.MarshalIndent(got[i], "", "  ")
				w, _ := json.MarshalIndent(want[i], "", "  ")
				t.Errorf("%s: object %d differs\nclusterctl:\n%s\ncreate:\n%s", file, i, g, w)
			}
		}
		for _, o := range got {
			u := &unstructured.Unstructured{Object: o}
			if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("clusterctl-test")); err != nil {
				t.Fatalf("%s: %s %s rejected: %v", file, u.GetKind(), u.GetName(), err)
			}
		}
	}
	// Cluster API acts on them: the plain control-plane Machine and the
	// workers' Machines of the machines flavor appear (KCP's own reconciler
	// does not run in this suite, so the KCP flavors stop at the API).
	eventually(t, "CAPI made the machines flavor's 3 Machines", func() error {
		l, err := machines(ns, "plain")
		if err != nil || len(l.Items) != 3 {
			return fmt.Errorf("%d machines (%v)", len(l.Items), err)
		}
		return nil
	})
	eventually(t, "CAPI made the default flavor's MachineSet", func() error {
		l := &clusterv1.MachineSetList{}
		if err := env.Client.List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "kcp"}); err != nil || len(l.Items) != 1 {
			return fmt.Errorf("%d machine sets (%v)", len(l.Items), err)
		}
		return nil
	})
	eventually(t, "the topology controller made the topology flavor's KubeadmControlPlane", func() error {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "topo"}, c); err != nil {
			return err
		}
		if c.Spec.ControlPlaneRef.Kind != "KubeadmControlPlane" {
			return fmt.Errorf("controlPlaneRef %+v", c.Spec.ControlPlaneRef)
		}
		return nil
	})
}
