package clusterapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	env, err = testenv.Start(context.Background(), testenv.Options{KubeadmBootstrap: true, KubeadmControlPlane: true, NoHub: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func kcp(ns string, replicas int32) *controlplanev1.KubeadmControlPlane {
	return &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: ns},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To(replicas),
			Version:  "v1.36.3",
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "cp"}}},
		},
	}
}

// What a real management cluster refuses is refused here, with Cluster
// API's own words.
func TestWebhooksRefuseWhatARealInstallRefuses(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "refuse")

	onlyOne := kcp(ns, 1)
	onlyOne.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
	err := env.Client.Create(ctx, onlyOne)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "when KubeadmControlPlane is configured to scale-in, replica count needs to be at least 3") {
		t.Errorf("a one-replica KubeadmControlPlane with maxSurge 0: want KCP's webhook's refusal, got %v", err)
	}

	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "md", Namespace: ns},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: "c",
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"pool": "b"}},
				Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("s")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "md"}},
			},
		},
	}
	err = env.Client.Create(ctx, md)
	if err == nil || !strings.Contains(err.Error(), `spec.template.metadata.labels: Forbidden: must match spec.selector "cluster.x-k8s.io/cluster-name=c,pool=a"`) {
		t.Errorf("a MachineDeployment whose template does not match its selector: want core's webhook's refusal, got %v", err)
	}
}

// Defaults a real install sets are set here: without them KCP cannot roll
// out a version bump ("RolloutStrategy type is not set to RollingUpdate").
func TestWebhooksSetUpstreamDefaults(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "defaults")

	cp := kcp(ns, 1)
	if err := env.Client.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	got := &controlplanev1.KubeadmControlPlane{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cp), got); err != nil {
		t.Fatal(err)
	}
	if s := got.Spec.Rollout.Strategy; s.Type != controlplanev1.RollingUpdateStrategyType || s.RollingUpdate.MaxSurge == nil || s.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("KubeadmControlPlane rollout strategy %+v, want KCP's default RollingUpdate with maxSurge 1", s)
	}

	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: ns},
		Spec: clusterv1.MachineSpec{ClusterName: "c", Version: "1.36.3",
			Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("s")},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: "m"}},
	}
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	gotM := &clusterv1.Machine{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), gotM); err != nil {
		t.Fatal(err)
	}
	if gotM.Labels[clusterv1.ClusterNameLabel] != "c" || gotM.Spec.Version != "v1.36.3" || gotM.Spec.Deletion.NodeDeletionTimeoutSeconds == nil {
		t.Errorf("Machine after core's defaulting: labels %v, version %q, nodeDeletionTimeoutSeconds %v; want the cluster-name label, v1.36.3 and a timeout",
			gotM.Labels, gotM.Spec.Version, gotM.Spec.Deletion.NodeDeletionTimeoutSeconds)
	}
}
