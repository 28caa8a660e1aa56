package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
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

// Nodes register as kubeadm and the kubelet leave them: Ready, with the
// configuration's taints or kubeadm's control-plane default, and without
// the not-ready taint the API server puts on a new Node (which the node
// lifecycle controller lifts in a real cluster). KubeadmControlPlane
// counts a control-plane Machine ready only with its taint.
func TestRegisterTaints(t *testing.T) {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{APIServerOnly: true, NoCRDs: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(env.Config)

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
