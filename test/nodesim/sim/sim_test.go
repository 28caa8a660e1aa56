package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
)

// kubeadm's configurations as Cluster API's kubeadm bootstrap provider
// renders them: an init with taints null, a worker's join with the
// uninitialized taint, a control-plane join with no taints set.
const (
	initConfig = `apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  kubeletExtraArgs:
  - name: provider-id
    value: 'edge://default/cp-1'
  name: 'cp-1'
  taints: null
`
	workerJoin = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
nodeRegistration:
  kubeletExtraArgs:
  - name: provider-id
    value: 'edge://default/w-1'
  name: 'w-1'
  taints:
  - effect: NoSchedule
    key: node.cluster.x-k8s.io/uninitialized
`
	controlPlaneJoin = `apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
controlPlane:
  localAPIEndpoint: {}
nodeRegistration:
  kubeletExtraArgs:
  - name: provider-id
    value: 'edge://default/cp-2'
  name: 'cp-2'
`
)

// workloadCluster is an API server for a simulated cluster's Nodes.
func workloadCluster(t *testing.T) kubernetes.Interface {
	t.Helper()
	env, err := testenv.Start(context.Background(), testenv.Options{APIServerOnly: true, NoCRDs: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return kubernetes.NewForConfigOrDie(env.Config)
}

// Nodes register as kubeadm and the kubelet leave them: Ready, with the
// configuration's taints or kubeadm's control-plane default, and without
// the not-ready taint the API server puts on a new Node (which the node
// lifecycle controller lifts in a real cluster). KubeadmControlPlane
// counts a control-plane Machine ready only with its taint.
func TestRegisterTaints(t *testing.T) {
	ctx := context.Background()
	cs := workloadCluster(t)

	controlPlaneTaint := corev1.Taint{Key: controlPlaneRole, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		verb, config, node string
		want               []corev1.Taint
	}{
		{"init", initConfig, "cp-1", []corev1.Taint{controlPlaneTaint}},
		{"join", workerJoin, "w-1", []corev1.Taint{{Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}},
		{"join", controlPlaneJoin, "cp-2", []corev1.Taint{controlPlaneTaint}},
	} {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "kubeadm.yaml"), []byte(tc.config), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Simulator{Client: cs, Root: root}
		if err := s.Run(ctx, []string{tc.verb, "--config", "/kubeadm.yaml"}); err != nil {
			t.Fatalf("kubeadm %s of %s: %v", tc.verb, tc.node, err)
		}
		n, err := cs.CoreV1().Nodes().Get(ctx, tc.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []corev1.Taint
		for _, taint := range n.Spec.Taints {
			got = append(got, corev1.Taint{Key: taint.Key, Value: taint.Value, Effect: taint.Effect})
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("node %s has taints %v, want %v", tc.node, got, tc.want)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			t.Errorf("node %s is not Ready: %v", tc.node, n.Status.Conditions)
		}
	}
}

// An upgrade plays kubeadm's order of things: the first control plane's
// `upgrade apply` moves the cluster's configuration and its static pods;
// a worker's `upgrade node` refuses until it has; and no Node reports the
// new version before its kubelet is replaced and restarted.
func TestUpgrade(t *testing.T) {
	ctx := context.Background()
	cs := workloadCluster(t)
	const from, to = "v1.35.4", "v1.36.3"
	host := func(verb, config string) *Simulator {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "kubeadm.yaml"), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Simulator{Client: cs, Root: root, Version: from}
		if err := s.Run(ctx, []string{verb, "--config", "/kubeadm.yaml"}); err != nil {
			t.Fatalf("kubeadm %s: %v", verb, err)
		}
		return s
	}
	cp := host("init", strings.Replace(initConfig, "kind: ClusterConfiguration", "kind: ClusterConfiguration\nkubernetesVersion: "+from, 1))
	w := host("join", workerJoin)
	serving := func(s *Simulator, node string, controlPlane bool) error {
		return s.Serving(ctx, to, node, controlPlane)
	}

	newKubeadm := func(s *Simulator) *Simulator { n := *s; n.Version = to; return &n }
	if err := newKubeadm(w).Run(ctx, []string{"upgrade", "node"}); err == nil || !strings.Contains(err.Error(), "upgrade the first control plane first") {
		t.Fatalf("a worker's upgrade node before the control plane's: %v, want a refusal", err)
	}
	if err := cp.Run(ctx, []string{"upgrade", "apply", to, "--yes"}); err == nil || !strings.Contains(err.Error(), "higher than the kubeadm version") {
		t.Fatalf("upgrade apply %s with kubeadm %s: %v, want a refusal", to, from, err)
	}
	if err := newKubeadm(cp).Run(ctx, []string{"upgrade", "apply", "v1.37.0", "--yes"}); err == nil {
		t.Fatal("upgrade apply to a version newer than kubeadm succeeded")
	}
	if err := newKubeadm(cp).Run(ctx, []string{"upgrade", "apply", to, "--yes", "--patches=/etc/kubernetes/patches", "--ignore-preflight-errors=SystemVerification"}); err != nil {
		t.Fatal(err)
	}
	if v, err := cp.ClusterVersion(ctx); err != nil || v != to {
		t.Fatalf("the cluster's configuration after upgrade apply: %q, %v", v, err)
	}
	manifest, err := os.ReadFile(filepath.Join(cp.Root, manifestsDir, "kube-apiserver.yaml"))
	if err != nil || !strings.Contains(string(manifest), image("kube-apiserver", to)) {
		t.Fatalf("kube-apiserver's manifest after upgrade apply: %q, %v", manifest, err)
	}
	if err := serving(cp, "cp-1", true); err == nil || !strings.Contains(err.Error(), "runs kubelet "+from) {
		t.Fatalf("the control plane serves on %s before its kubelet restarted: %v", to, err)
	}
	if err := newKubeadm(cp).RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := serving(cp, "cp-1", true); err != nil {
		t.Fatalf("the control plane after its kubelet restarted: %v", err)
	}

	if err := newKubeadm(w).Run(ctx, []string{"upgrade", "node"}); err != nil {
		t.Fatal(err)
	}
	if err := serving(w, "w-1", false); err == nil {
		t.Fatal("the worker serves the new version before its kubelet restarted")
	}
	if err := newKubeadm(w).RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := serving(w, "w-1", false); err != nil {
		t.Fatalf("the worker after its kubelet restarted: %v", err)
	}
}
