package clusterapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A ClusterClass of fleet's templates, as a platform team would write one.
const edgeClass = `
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: EdgeClusterTemplate
metadata: {name: edge}
spec:
  template:
    spec: {}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: EdgeMachineTemplate
metadata: {name: edge-control-plane}
spec:
  template:
    spec:
      hostSelector: {matchLabels: {role: control-plane}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: EdgeMachineTemplate
metadata: {name: edge-worker}
spec:
  template:
    spec:
      hostSelector: {matchLabels: {role: worker}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta2
kind: KubeadmControlPlaneTemplate
metadata: {name: edge-control-plane}
spec:
  template:
    spec:
      kubeadmConfigSpec: {format: cloud-config}
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta2
kind: KubeadmConfigTemplate
metadata: {name: edge-worker}
spec:
  template:
    spec: {format: cloud-config}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: ClusterClass
metadata: {name: edge}
spec:
  infrastructure:
    templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: EdgeClusterTemplate, name: edge}
  controlPlane:
    templateRef: {apiVersion: controlplane.cluster.x-k8s.io/v1beta2, kind: KubeadmControlPlaneTemplate, name: edge-control-plane}
    machineInfrastructure:
      templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: EdgeMachineTemplate, name: edge-control-plane}
  workers:
    machineDeployments:
    - class: worker
      bootstrap:
        templateRef: {apiVersion: bootstrap.cluster.x-k8s.io/v1beta2, kind: KubeadmConfigTemplate, name: edge-worker}
      infrastructure:
        templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1, kind: EdgeMachineTemplate, name: edge-worker}
`

func createYAML(t *testing.T, ns, docs string) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(docs), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the test's YAML: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// Cluster API's real topology reconcilers turn a ClusterClass of fleet's
// templates and a Cluster's topology into the objects of a cluster: an
// EdgeCluster cloned from the EdgeClusterTemplate, a KubeadmControlPlane
// whose machines are cloned from the EdgeMachineTemplate, and a
// MachineDeployment of workers.
func TestClusterClassOfEdgeTemplates(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "topology")
	createYAML(t, ns, edgeClass)
	createYAML(t, ns, `
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: store-1}
spec:
  topology:
    classRef: {name: edge}
    version: v1.36.3
    controlPlane: {replicas: 1}
    workers:
      machineDeployments:
      - {class: worker, name: md-0, replicas: 1}
`)
	cluster := &clusterv1.Cluster{}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the topology controller fills the Cluster's references", func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "store-1"}, cluster); err != nil {
			return err
		}
		if cluster.Spec.InfrastructureRef.Kind != "EdgeCluster" || cluster.Spec.ControlPlaneRef.Kind != "KubeadmControlPlane" {
			return fmt.Errorf("infrastructureRef %+v, controlPlaneRef %+v", cluster.Spec.InfrastructureRef, cluster.Spec.ControlPlaneRef)
		}
		return nil
	})
	ec := &infrav1.EdgeCluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Spec.InfrastructureRef.Name}, ec); err != nil {
		t.Fatalf("the EdgeCluster the topology names: %v", err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Spec.ControlPlaneRef.Name}, kcp); err != nil {
		t.Fatalf("the KubeadmControlPlane the topology names: %v", err)
	}
	if kcp.Spec.Version != "v1.36.3" || kcp.Spec.Replicas == nil || *kcp.Spec.Replicas != 1 ||
		kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Kind != "EdgeMachineTemplate" {
		t.Errorf("KubeadmControlPlane version %s, replicas %v, machine template %+v", kcp.Spec.Version, kcp.Spec.Replicas,
			kcp.Spec.MachineTemplate.Spec.InfrastructureRef)
	}
	emt := &infrav1.EdgeMachineTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name}, emt); err != nil {
		t.Fatalf("the control plane's EdgeMachineTemplate: %v", err)
	}
	if got := emt.Spec.Template.Spec.HostSelector; got == nil || got.MatchLabels["role"] != "control-plane" {
		t.Errorf("the control plane's cloned EdgeMachineTemplate selects %v, want the class's role=control-plane", got)
	}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the topology's MachineDeployment", func() error {
		mds := &clusterv1.MachineDeploymentList{}
		if err := env.Client.List(ctx, mds, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: "md-0"}); err != nil {
			return err
		}
		if len(mds.Items) != 1 || mds.Items[0].Spec.Template.Spec.InfrastructureRef.Kind != "EdgeMachineTemplate" {
			return fmt.Errorf("%d MachineDeployments for md-0", len(mds.Items))
		}
		return nil
	})
}

// A Cluster whose class does not exist is not silently taken: Cluster API
// refuses it, or says so in its TopologyReconciled condition.
func TestClusterOfAMissingClass(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "missing")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(clusterv1.GroupVersion.String())
	u.SetKind("Cluster")
	u.SetName("nowhere")
	u.SetNamespace(ns)
	_ = unstructured.SetNestedMap(u.Object, map[string]any{
		"classRef": map[string]any{"name": "no-such-class"}, "version": "v1.36.3"}, "spec", "topology")
	if err := env.Client.Create(ctx, u); err != nil {
		if !strings.Contains(err.Error(), "no-such-class") {
			t.Fatalf("refused without naming the class: %v", err)
		}
		return
	}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "TopologyReconciled False naming the missing class", func() error {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nowhere"}, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition)
		if cond == nil || cond.Status != "False" || !strings.Contains(cond.Message, "no-such-class") {
			return fmt.Errorf("TopologyReconciled %+v", cond)
		}
		return nil
	})
}
