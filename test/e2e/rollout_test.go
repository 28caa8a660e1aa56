package e2e

import (
	"context"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A MachineDeployment rolled out OnDelete on a site with exactly as many
// worker hosts as workers: a template change replaces nothing by itself;
// the operator deletes the old Machine, its host is reset and taken by the
// replacement, made from the new template.
func TestOnDeleteRolloutOnAnExactSizeSite(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	gw, _ := startFleetHub(t, ns, freeAddr(t))
	hubURL := "https://" + gw.Addr()
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	cpToken, wToken := roleTokens(t, ns)
	pin := gw.CA().Pin()
	startAgent(t, "cp-0", agentBin, simBin, hubURL, pin, cpToken, wkc)
	startAgent(t, "w-0", agentBin, simBin, hubURL, pin, wToken, wkc)
	eventually(t, "2 hosts enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 2) })

	createCPMachine(t, c, ns, "cp-0", nil)
	for _, name := range []string{"workers-v1", "workers-v2"} {
		must(t, c.Create(ctx, &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
				Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: joinSpec()},
					PreKubeadmCommands: []string{"echo " + name}}}}}))
	}
	must(t, c.Create(ctx, &infrav1.EdgeMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: infrav1.EdgeMachineSpec{
			HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}}}}}))
	mdLabels := map[string]string{"fleet.test/md": "workers", clusterv1.ClusterNameLabel: clusterName}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: clusterName, Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet.test/md": "workers"}},
			Rollout:  clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{Type: clusterv1.OnDeleteMachineDeploymentStrategyType}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: mdLabels},
				Spec: clusterv1.MachineSpec{ClusterName: clusterName, Version: "v1.36.3",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: "workers-v1"}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "workers"},
					Deletion:          clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
				},
			},
		},
	}
	must(t, c.Create(ctx, md))
	eventually(t, "2 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 2) })
	first := workerOn(ctx, t, c, ns)

	// A new template: OnDelete replaces nothing by itself.
	must(t, c.Get(ctx, client.ObjectKeyFromObject(md), md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Template.Spec.Bootstrap.ConfigRef.Name = "workers-v2"
	must(t, c.Patch(ctx, md, patch))
	eventually(t, "the MachineDeployment sees the worker out of date", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
			return err
		}
		if md.Status.ObservedGeneration != md.Generation || ptr.Deref(md.Status.UpToDateReplicas, -1) != 0 {
			return fmt.Errorf("observedGeneration %d of %d, upToDateReplicas %v", md.Status.ObservedGeneration, md.Generation, md.Status.UpToDateReplicas)
		}
		return nil
	})
	if m := workerOn(ctx, t, c, ns); m.Name != first.Name {
		t.Fatalf("OnDelete replaced the worker by itself: %s became %s", first.Name, m.Name)
	}

	// The operator deletes it: the replacement takes the freed host.
	must(t, c.Delete(ctx, first))
	eventually(t, "the replacement Running on the same host, from the new template", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(first), &clusterv1.Machine{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the old Machine %s is still there (%v)", first.Name, err)
		}
		if err := testenv.MachinesRunning(ctx, c, ns, 2); err != nil {
			return err
		}
		m := workerOn(ctx, t, c, ns)
		if m.Spec.ProviderID != first.Spec.ProviderID {
			return fmt.Errorf("the replacement %s is on %s, the old one was on %s", m.Name, m.Spec.ProviderID, first.Spec.ProviderID)
		}
		kc := &bootstrapv1.KubeadmConfig{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Spec.Bootstrap.ConfigRef.Name}, kc); err != nil {
			return err
		}
		if len(kc.Spec.PreKubeadmCommands) != 1 || kc.Spec.PreKubeadmCommands[0] != "echo workers-v2" {
			return fmt.Errorf("the replacement's bootstrap config runs %v, want the new template's", kc.Spec.PreKubeadmCommands)
		}
		return nil
	})
}

// workerOn is the cluster's one live worker Machine.
func workerOn(ctx context.Context, t *testing.T, c client.Client, ns string) *clusterv1.Machine {
	t.Helper()
	l := &clusterv1.MachineList{}
	must(t, c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{"fleet.test/md": "workers"}))
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp.IsZero() {
			return &l.Items[i]
		}
	}
	t.Fatalf("no live worker Machine among %d", len(l.Items))
	return nil
}
