package cli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// `create cluster --class` refuses the flags the class replaces and
// variables that are not NAME=YAML, before anything is sent.
func TestCreateClusterClassFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--host-selector", "site=a"}, "--host-selector does not go with --class"},
		{[]string{"--kubeadm-config", "x.yaml"}, "--kubeadm-config does not go with --class"},
		{[]string{"--health-check=false"}, "--health-check does not go with --class"},
		{[]string{"--variable", "site"}, `--variable "site": want NAME=VALUE`},
		{[]string{"--variable", "bad name=x"}, "want NAME=VALUE"},
		{[]string{"--variable", "files=[a"}, "--variable files: the value is not YAML"},
		{[]string{"--variables", "/no/such/file"}, "--variables /no/such/file"},
	} {
		_, _, err := fleet(t, append([]string{"create", "cluster", "c", "--kubernetes-version", "v1.36.3", "--class", "edge"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want an error saying %q, got %v", tc.args, tc.want, err)
		}
	}
	if _, _, err := fleet(t, "create", "cluster", "c", "--kubernetes-version", "v1.36.3", "--variable", "site=a"); err == nil ||
		!strings.Contains(err.Error(), "for a cluster of a ClusterClass (--class)") {
		t.Errorf("--variable without --class: %v", err)
	}
}

// A site of fleet's ClusterClass, made, scaled, described and deleted with
// kubectl fleet as a cluster without one is: create installs the class,
// Cluster API's webhook refuses a bad variable with nothing written, scale
// edits the topology (never the objects the topology controller owns).
func TestCreateScaleDescribeDeleteTopologyCluster(t *testing.T) {
	ctx := context.Background()
	ns := "topo-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	create := []string{"create", "cluster", "store-1", "-n", ns, "--class", "edge", "--kubernetes-version", "v1.36.3", "--worker-machines", "1",
		"--variable", "site=store-1"}

	// A variable the class's schema refuses: the class is installed, the
	// Cluster is not.
	out, _, err := fleet(t, append(create, "--variable", "certificatesExpiryDays=3")...)
	if err == nil || !strings.Contains(err.Error(), "nothing of it was written") || !strings.Contains(err.Error(), "greater than or equal to 7") {
		t.Fatalf("certificatesExpiryDays=3: want Cluster API's refusal, got %v\n%s", err, out)
	}
	if strings.Count(err.Error(), "\n") > 0 {
		t.Errorf("the refusal takes more than one line:\n%v", err)
	}
	if !strings.Contains(out, "clusterclass/edge installed") {
		t.Errorf("create did not say it installed the class:\n%s", out)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-1"}, &clusterv1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused Cluster was written: %v", err)
	}
	// Another class is not installed for the user.
	if _, _, err := fleet(t, "create", "cluster", "x", "-n", ns, "--class", "nope", "--kubernetes-version", "v1.36.3"); err == nil ||
		!strings.Contains(err.Error(), "ClusterClass nope not found in namespace "+ns) {
		t.Errorf("a missing class: %v", err)
	}

	vars := filepath.Join(t.TempDir(), "vars.yaml")
	if err := os.WriteFile(vars, []byte("certificatesExpiryDays: 30\nworkerHostSelector: {matchLabels: {role: worker}}\nsite: overridden\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := fleet(t, append(create, "--variables", vars)...)
	if err != nil {
		t.Fatalf("create --class edge: %v\n%s", err, stderr)
	}
	if strings.Contains(out, "installed") || !strings.Contains(out, "cluster/store-1 applied (ClusterClass edge)") {
		t.Errorf("create output:\n%s", out)
	}
	cluster := &clusterv1.Cluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-1"}, cluster); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range cluster.Spec.Topology.Variables {
		got[v.Name] = string(v.Value.Raw)
	}
	if got["site"] != `"store-1"` || got["certificatesExpiryDays"] != "30" || got["workerHostSelector"] != `{"matchLabels":{"role":"worker"}}` {
		t.Errorf("topology variables %v: want the file's, with --variable over it", got)
	}

	kcpOf := func() (*controlplanev1.KubeadmControlPlane, error) {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-1"}, c); err != nil {
			return nil, err
		}
		kcp := &controlplanev1.KubeadmControlPlane{}
		if c.Spec.ControlPlaneRef.Name == "" {
			return nil, fmt.Errorf("no control plane yet")
		}
		return kcp, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.Spec.ControlPlaneRef.Name}, kcp)
	}
	workers := func() (int32, error) {
		mds := &clusterv1.MachineDeploymentList{}
		if err := env.Client.List(ctx, mds, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: "store-1"}); err != nil {
			return 0, err
		}
		if len(mds.Items) != 1 {
			return 0, fmt.Errorf("%d MachineDeployments", len(mds.Items))
		}
		return ptr.Deref(mds.Items[0].Spec.Replicas, -1), nil
	}
	want := func(cp, w int32) func() error {
		return func() error {
			kcp, err := kcpOf()
			if err != nil {
				return err
			}
			n, err := workers()
			if err != nil {
				return err
			}
			if ptr.Deref(kcp.Spec.Replicas, -1) != cp || n != w {
				return fmt.Errorf("KubeadmControlPlane replicas %d, workers %d", ptr.Deref(kcp.Spec.Replicas, -1), n)
			}
			return nil
		}
	}
	eventually(t, "the topology controller makes a control plane of 1 and 1 worker", want(1, 1))

	out, _, err = fleet(t, "get", "clusters", "-n", ns)
	if err != nil || !regexp.MustCompile(`(?m)^store-1\s+edge\s+.*\sv1\.36\.3$`).MatchString(out) {
		t.Errorf("get clusters shows no CLUSTERCLASS edge and VERSION v1.36.3: %v\n%s", err, out)
	}

	// Scaling edits spec.topology; the topology controller carries it out.
	out, _, err = fleet(t, "scale", "cluster", "store-1", "-n", ns, "--worker-machines", "2", "--control-plane-machines", "3")
	if err != nil || !strings.Contains(out, "cluster/store-1 scaled (ClusterClass edge): workers md-0 to 2, control plane to 3") {
		t.Fatalf("scale: %v\n%s", err, out)
	}
	eventually(t, "the topology controller scales the control plane to 3 and the workers to 2", want(3, 2))
	if _, _, err := fleet(t, "scale", "cluster", "store-1", "-n", ns, "--worker-machines", "1", "--machine-deployment", "md-9"); err == nil ||
		!strings.Contains(err.Error(), `no worker pool "md-9"`) {
		t.Errorf("an unknown worker pool: %v", err)
	}

	out, _, err = fleet(t, "describe", "cluster", "store-1", "-n", ns)
	if err != nil || !regexp.MustCompile(`(?m)^Cluster/store-1\s+\S+\s+.*class edge v1\.36\.3`).MatchString(out) ||
		!regexp.MustCompile(`MachineDeployment/store-1-md-0-\S+\s+\S+\s+\d+/2 ready topology md-0`).MatchString(out) {
		t.Errorf("describe shows no class, version or worker pool: %v\n%s", err, out)
	}

	// An upgrade sets the topology's version, once a spare host can take
	// the KubeadmControlPlane's rollout: Cluster API adds a Machine first.
	upgrade := []string{"upgrade", "cluster", "store-1", "-n", ns, "--kubernetes-version", "v1.37.0"}
	if _, _, err := fleet(t, upgrade...); err == nil || !strings.Contains(err.Error(),
		`it needs 1 free host(s) matching "site=store-1" that can run v1.37.0, and there are 0`) {
		t.Fatalf("upgrade without a spare host: %v", err)
	}
	spare := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "spare", Labels: map[string]string{"site": "store-1"}}}
	if err := env.Client.Create(ctx, spare); err != nil {
		t.Fatal(err)
	}
	if err := setStatus(spare, func() { spare.Status.Facts.KubernetesVersions = []string{"v1.37.0"} }); err != nil {
		t.Fatal(err)
	}
	// What KubeadmControlPlane's controller, which this test does not
	// run, reports of a provisioned control plane: Cluster API's webhook
	// refuses a new version before.
	kcp, err := kcpOf()
	if err != nil {
		t.Fatal(err)
	}
	if err := setStatus(kcp, func() { kcp.Status.Version = "v1.36.3" }); err != nil { //nolint:staticcheck // Cluster API's webhook reads this field
		t.Fatal(err)
	}
	out, _, err = fleet(t, upgrade...)
	if err != nil || !strings.Contains(out, "cluster/store-1: topology version v1.36.3 → v1.37.0 ordered; kubeadmcontrolplane "+kcp.Name+
		" goes first (Cluster API replaces its 3 machine(s) one at a time on a spare host), then the MachineDeployments") {
		t.Fatalf("upgrade with a spare host: %v\n%s", err, out)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-1"}, cluster); err != nil || cluster.Spec.Topology.Version != "v1.37.0" {
		t.Fatalf("the topology's version after the upgrade: %q, %v", cluster.Spec.Topology.Version, err)
	}

	out, _, err = fleet(t, "delete", "cluster", "store-1", "-n", ns, "--wait", "--timeout", "2m")
	if err != nil || !strings.Contains(out, "cluster store-1 is gone") {
		t.Fatalf("delete --wait: %v\n%s", err, out)
	}
}

// A Cluster whose class is missing: describe says why in one line.
func TestDescribeTopologyOfAMissingClass(t *testing.T) {
	ctx := context.Background()
	ns := "noclass-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(clusterv1.GroupVersion.String())
	u.SetKind("Cluster")
	u.SetName("orphan")
	u.SetNamespace(ns)
	_ = unstructured.SetNestedMap(u.Object, map[string]any{"classRef": map[string]any{"name": "gone"}, "version": "v1.36.3"}, "spec", "topology")
	if err := env.Client.Create(ctx, u); err != nil {
		if !strings.Contains(err.Error(), "gone") {
			t.Fatalf("refused without naming the class: %v", err)
		}
		return
	}
	eventually(t, "describe says the class is missing", func() error {
		out, _, err := fleet(t, "describe", "cluster", "orphan", "-n", ns)
		if err != nil {
			return err
		}
		line := regexp.MustCompile(`(?m)^Cluster/orphan.*$`).FindString(out)
		if !strings.Contains(line, "topology: ") || !strings.Contains(line, "gone") || !strings.Contains(out, "not made yet from ClusterClass gone") {
			return fmt.Errorf("the Cluster's line says nothing of the missing class:\n%s", out)
		}
		return nil
	})
}
