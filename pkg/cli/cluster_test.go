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
	"k8s.io/apimachinery/pkg/types"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, 250*time.Millisecond, what, cond)
}

func machines(ns, cluster string) (*clusterv1.MachineList, error) {
	l := &clusterv1.MachineList{}
	err := env.Client.List(context.Background(), l, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster})
	return l, err
}

func TestCreateClusterDryRun(t *testing.T) {
	out, _, err := fleet(t, "create", "cluster", "dry", "--kubernetes-version", "v1.36.3", "--worker-machines", "2",
		"--host-selector", "site=s1", "--dry-run=client", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(out, "\n") {
		if k, ok := strings.CutPrefix(line, "kind: "); ok {
			kinds = append(kinds, k)
		}
	}
	want := "Cluster EdgeCluster EdgeMachineTemplate KubeadmControlPlane EdgeMachineTemplate KubeadmConfigTemplate MachineDeployment MachineHealthCheck MachineHealthCheck"
	if strings.Join(kinds, " ") != want {
		t.Errorf("kinds %v, want %s", kinds, want)
	}
	for _, s := range []string{"value: '{{ ds.meta_data.provider_id }}'", "name: '{{ ds.meta_data.local_hostname }}'",
		"host: dry.hosts.fleet.internal", "site: s1", "replicas: 2", "version: v1.36.3"} {
		if !strings.Contains(out, s) {
			t.Errorf("dry run lacks %q", s)
		}
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: "hosts", Name: "dry"}, &clusterv1.Cluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("--dry-run=client wrote the Cluster: %v", err)
	}
}

func TestCreateScaleDeleteCluster(t *testing.T) {
	ctx := context.Background()
	ns := "edge-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if _, _, err := fleet(t, "create", "cluster", "bad", "-n", ns, "--kubernetes-version", "v1.36.3", "--control-plane-machines", "2"); err == nil ||
		!strings.Contains(err.Error(), "odd number") {
		t.Fatalf("even control plane: %v", err)
	}
	if _, _, err := fleet(t, "create", "cluster", "bad", "--kubernetes-version", "1.36"); err == nil || !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
		t.Fatalf("bad version: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	args := []string{"create", "cluster", "shop", "-n", ns, "--kubernetes-version", "v1.36.3", "--control-plane=machines",
		"--worker-machines", "2", "--host-selector", "site=shop"}
	out, stderr, err := fleet(t, args...)
	if err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, "machinedeployment/shop-md-0 applied") || !strings.Contains(stderr, "only 0 Available host(s)") {
		t.Errorf("create output:\n%s\nstderr:\n%s", out, stderr)
	}
	// Re-running is harmless.
	if _, stderr, err := fleet(t, args...); err != nil {
		t.Fatalf("re-run: %v\n%s", err, stderr)
	}
	// Cluster API accepts what was written: the MachineDeployment makes its
	// Machines, with EdgeMachines from the template.
	eventually(t, "CAPI created 1 control-plane and 2 worker Machines", func() error {
		l, err := machines(ns, "shop")
		if err != nil {
			return err
		}
		if len(l.Items) != 3 {
			return fmt.Errorf("%d machines", len(l.Items))
		}
		return nil
	})
	ems := &infrav1.EdgeMachineList{}
	must(env.Client.List(ctx, ems, client.InNamespace(ns)))
	for _, em := range ems.Items {
		if em.Spec.HostSelector == nil || em.Spec.HostSelector.MatchLabels["site"] != "shop" {
			t.Errorf("EdgeMachine %s selector %v", em.Name, em.Spec.HostSelector)
		}
	}

	// get shows what CAPI made of it: the table has the Cluster CRD's
	// columns, as kubectl get clusters (TestGetTablesAreTheCRDColumns), and
	// the endpoint fleet chose is in the object.
	out, _, err = fleet(t, "get", "clusters", "-n", ns)
	if err != nil || !regexp.MustCompile(`(?m)^NAME\s+CLUSTERCLASS\s+AVAILABLE\s+.*\sPHASE\s+AGE\s+VERSION\n(shop)\s+`).MatchString(out) {
		t.Errorf("get clusters: %v\n%s", err, out)
	}
	out, _, err = fleet(t, "get", "clusters", "-n", ns, "-o", "jsonpath={.items[0].spec.controlPlaneEndpoint.host}:{.items[0].spec.controlPlaneEndpoint.port}")
	if err != nil || out != "shop."+ns+".fleet.internal:6443" {
		t.Errorf("get clusters -o jsonpath: %v\n%s", err, out)
	}
	out, _, err = fleet(t, "get", "machines", "-n", ns)
	if err != nil || strings.Count(out, "\nshop-") != 3 || !strings.Contains(out, "PROVIDERID") {
		t.Errorf("get machines: %v\n%s", err, out)
	}
	// --wait shows progress and gives up at its timeout with where it stood.
	out, _, err = fleet(t, append(args, "--wait", "--timeout", "3s")...)
	if err == nil || !strings.Contains(err.Error(), "timed out waiting for cluster shop") || !strings.Contains(out, "machines: 0/3 Running") {
		t.Errorf("--wait: %v\n%s", err, out)
	}

	if _, _, err := fleet(t, "scale", "cluster", "shop", "-n", ns, "--worker-machines", "3"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "4 machines after scaling workers to 3", func() error {
		l, err := machines(ns, "shop")
		if err != nil || len(l.Items) != 4 {
			return fmt.Errorf("%v machines (%v)", len(l.Items), err)
		}
		return nil
	})
	if _, _, err := fleet(t, "scale", "cluster", "shop", "-n", ns, "--control-plane-machines", "2"); err == nil || !strings.Contains(err.Error(), "odd number") {
		t.Errorf("even control plane: %v", err)
	}
	if _, _, err := fleet(t, "scale", "cluster", "shop", "-n", ns, "--control-plane-machines", "3"); err == nil || !strings.Contains(err.Error(), "--control-plane=machines") {
		t.Errorf("scaling a machines control plane: %v", err)
	}
	if _, _, err := fleet(t, "scale", "cluster", "nope", "-n", ns, "--worker-machines", "1"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown cluster: %v", err)
	}

	// A KubeadmControlPlane cluster scales its control plane through the
	// scale subresource.
	if _, stderr, err := fleet(t, "create", "cluster", "kcp", "-n", ns, "--kubernetes-version", "v1.36.3"); err != nil {
		t.Fatalf("create kcp: %v\n%s", err, stderr)
	}
	if _, _, err := fleet(t, "scale", "cluster", "kcp", "-n", ns, "--control-plane-machines", "3"); err != nil {
		t.Fatal(err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	must(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kcp-control-plane"}, kcp))
	if kcp.Spec.Replicas == nil || *kcp.Spec.Replicas != 3 {
		t.Errorf("KCP replicas %v", kcp.Spec.Replicas)
	}

	out, _, err = fleet(t, "delete", "cluster", "shop", "-n", ns, "--wait", "--timeout", "2m")
	if err != nil {
		t.Fatalf("delete --wait: %v\n%s", err, out)
	}
	if !strings.Contains(out, "cluster shop is gone") {
		t.Errorf("delete output:\n%s", out)
	}
	if l, _ := machines(ns, "shop"); len(l.Items) != 0 {
		t.Errorf("%d machines left", len(l.Items))
	}
}

// --kubeadm-config: the dry run shows the file merged into the objects; a
// file with an unknown field, or one the CRDs refuse, writes nothing.
func TestCreateClusterKubeadmConfig(t *testing.T) {
	ctx := context.Background()
	out, _, err := fleet(t, "create", "cluster", "lab", "--kubernetes-version", "v1.36.3", "--worker-machines", "1",
		"--host-selector", "site=lab", "--control-plane-host-selector", "role=cp",
		"--kubeadm-config", "../../docs/templates/kubeadm-cgroupv1-test-hosts.yaml", "--ignore-preflight-errors", "NumCPU",
		"--dry-run=client", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	for s, n := range map[string]int{"imagePullPolicy: Never": 3, "- SystemVerification\n": 3, "- NumCPU\n": 3,
		"failCgroupV1: false": 2, "- addon/kube-proxy": 0, "kind: KubeProxyConfiguration": 2,
		"- cat /run/kubeadm/kube-proxy-configuration.yaml >> /run/kubeadm/kubeadm.yaml\n": 2, "value: '{{ ds.meta_data.provider_id }}'": 3,
		"directory: /etc/kubernetes/patches": 3, "hostSelector:\n    matchLabels:\n      role: cp\n      site: lab\n": 1} {
		if got := strings.Count(out, s); got != n {
			t.Errorf("dry run has %q %d times, want %d", s, got, n)
		}
	}

	ns := "kubeadm-" + fmt.Sprint(time.Now().UnixNano()%100000)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct{ file, want string }{
		"typo":    {"joinConfiguration:\n  nodeRegistration:\n    ignorePreflightError: [Swap]\n", `unknown field "joinConfiguration.nodeRegistration.ignorePreflightError"`},
		"no-path": {"files:\n- content: hello\n", "nothing was written"},
	} {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fleet(t, "create", "cluster", name, "-n", ns, "--kubernetes-version", "v1.36.3", "--kubeadm-config", path); err == nil ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
		for _, obj := range []client.Object{&clusterv1.Cluster{}, &infrav1.EdgeCluster{}} {
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%s: a refused file left a %T: %v", name, obj, err)
			}
		}
	}
}

// Cluster API's reconcilers write a MachineDeployment all the time; scale
// must not fail when one wrote it between scale's read and its write
// (kubectl scale patches, with no resourceVersion).
func TestScaleWhileTheMachineDeploymentIsWritten(t *testing.T) {
	ns := newNamespace(t, "busy")
	ctx := context.Background()
	if _, stderr, err := fleet(t, "create", "cluster", "busy", "-n", ns, "--kubernetes-version", "v1.36.3",
		"--control-plane=machines", "--worker-machines", "0"); err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	key := client.ObjectKey{Namespace: ns, Name: "busy-md-0"}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
			p := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"test.fleet/writes":"%d"}}}`, i))
			_ = env.Client.Patch(ctx, md, p)
		}
	}()
	for n := 1; n <= 8; n++ {
		if _, stderr, err := fleet(t, "scale", "cluster", "busy", "-n", ns, "--worker-machines", fmt.Sprint(n)); err != nil {
			t.Errorf("scale to %d while the MachineDeployment is written: %v\n%s", n, err, stderr)
		}
	}
	close(stop)
	<-done
	md := &clusterv1.MachineDeployment{}
	if err := env.Client.Get(ctx, key, md); err != nil {
		t.Fatal(err)
	}
	if md.Spec.Replicas == nil || *md.Spec.Replicas != 8 {
		t.Errorf("replicas %v, want 8", md.Spec.Replicas)
	}
}
