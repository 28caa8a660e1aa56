package reconcilers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
)

// A MachineDeployment on a site with exactly as many hosts as Machines
// (maxSurge 0) moves to a new Kubernetes version in place through the
// hub's hooks: the real Cluster API asks CanUpdateMachineSet, moves the
// Machine, calls UpdateMachine until the host reports the version; no
// Machine is deleted and no host reset. A version the host cannot get is
// refused by the hooks, and Cluster API falls back to replacing the Machine.
func TestMachineDeploymentUpgradesInPlaceThroughTheHooks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.withCluster("ip", endpoint)
	w.bootstrapSecret("ip-bootstrap", cloudConfig())
	agent := w.startAgent()
	w.host("ip-host", nil)
	report := func(what string, fn func(*infrav1.EdgeHostStatus)) { w.reportHost("ip-host", what, fn) }
	report("the agent reports v1.36.3, v1.37.1 staged", func(s *infrav1.EdgeHostStatus) {
		s.KubernetesVersion, s.Facts.KubernetesVersions = "v1.36.3", []string{"v1.37.1"}
	})

	w.eventually("the hub's hooks registered", func() error {
		ec := &runtimev1.ExtensionConfig{}
		if err := env.Client.Get(w.ctx, client.ObjectKey{Name: inplace.ExtensionName}, ec); err != nil {
			return err
		}
		if len(ec.Status.Handlers) != 3 {
			return fmt.Errorf("handlers %+v", ec.Status.Handlers)
		}
		return nil
	})

	// Cluster API starts an in-place update only for Machines whose
	// bootstrap data came from a bootstrap config (not from a data secret
	// named by hand), so the workers use a KubeadmConfigTemplate, and the
	// test plays CABPK, which this suite does not run.
	w.must(env.Client.Create(w.ctx, &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: objMeta(w.ns, "ip")}))
	go w.playBootstrapProvider("ip-bootstrap")
	md := w.machineDeployment("ip", 1, "ip-bootstrap", infrav1.EdgeMachineSpec{})
	setMD := func(what string, fn func(*clusterv1.MachineDeployment)) {
		w.eventually(what, func() error {
			cur := &clusterv1.MachineDeployment{}
			if err := w.get(md.Name, cur); err != nil {
				return err
			}
			patch := client.MergeFrom(cur.DeepCopy())
			fn(cur)
			return env.Client.Patch(w.ctx, cur, patch)
		})
	}
	setMD("maxSurge 0, a KubeadmConfigTemplate", func(md *clusterv1.MachineDeployment) {
		md.Spec.Template.Spec.Bootstrap = clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: "ip"}}
		md.Spec.Rollout.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
		md.Spec.Rollout.Strategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	})
	machine := func() (*clusterv1.Machine, error) {
		list := &clusterv1.MachineList{}
		if err := env.Client.List(w.ctx, list, client.InNamespace(w.ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name}); err != nil {
			return nil, err
		}
		if len(list.Items) != 1 {
			return nil, fmt.Errorf("%d Machines", len(list.Items))
		}
		return &list.Items[0], nil
	}
	var uid types.UID
	w.eventually("the Machine has its Node", func() error {
		m, err := machine()
		if err != nil {
			return err
		}
		if !m.Status.NodeRef.IsDefined() {
			return fmt.Errorf("machine %s has no nodeRef", m.Name)
		}
		uid = m.UID
		return nil
	})

	setMD("v1.37.1", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = "v1.37.1" })
	w.eventually("the host ordered to v1.37.1 and the Machine updating in place", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get("ip-host", h); err != nil {
			return err
		}
		if h.Spec.ClaimRef == nil || h.Spec.ClaimRef.KubernetesVersion != "v1.37.1" {
			return fmt.Errorf("claim %+v", h.Spec.ClaimRef)
		}
		m, err := machine()
		if err != nil {
			return err
		}
		c := condition(m.Status.Conditions, clusterv1.MachineUpdatingCondition)
		if m.UID != uid || c == nil || c.Reason != clusterv1.MachineInPlaceUpdatingReason || !strings.Contains(c.Message, "EdgeHost ip-host is ordered to upgrade from v1.36.3 to v1.37.1") {
			return fmt.Errorf("machine %s (uid %s, was %s) Updating %+v", m.Name, m.UID, uid, c)
		}
		return nil
	})
	report("the agent at kubeadm", func(s *infrav1.EdgeHostStatus) {
		s.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.36.3", To: "v1.37.1", State: infrav1.UpgradeRunning, Step: "kubeadm upgrade node"}
	})
	w.eventually("UpdateMachine reports the agent's step", func() error {
		m, err := machine()
		if err != nil {
			return err
		}
		if c := condition(m.Status.Conditions, clusterv1.MachineUpdatingCondition); c == nil || !strings.Contains(c.Message, "upgrading from v1.36.3 to v1.37.1: kubeadm upgrade node") {
			return fmt.Errorf("Updating %+v", c)
		}
		return nil
	})
	report("the agent upgraded", func(s *infrav1.EdgeHostStatus) {
		s.KubernetesVersion = "v1.37.1"
		s.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.36.3", To: "v1.37.1", State: infrav1.UpgradeSucceeded}
	})
	w.eventually("the Machine updated in place and up to date", func() error {
		m, err := machine()
		if err != nil {
			return err
		}
		up := condition(m.Status.Conditions, clusterv1.MachineUpToDateCondition)
		_, marked := m.Annotations[clusterv1.UpdateInProgressAnnotation]
		if m.UID != uid || m.Spec.Version != "v1.37.1" || marked || up == nil || up.Status != "True" {
			return fmt.Errorf("machine %s (uid %s, was %s) version %s marked %v UpToDate %+v", m.Name, m.UID, uid, m.Spec.Version, marked, up)
		}
		return nil
	})
	if n := agent.resetCount("ip-host"); n != 0 {
		t.Fatalf("the host was reset %d times during an in-place upgrade", n)
	}

	// v1.38.0 is not staged: not in place, so Cluster API replaces the
	// Machine (the host is reset and provisioned again).
	setMD("v1.38.0", func(md *clusterv1.MachineDeployment) { md.Spec.Template.Spec.Version = "v1.38.0" })
	w.eventually("the Machine replaced", func() error {
		m, err := machine()
		if err != nil {
			return err
		}
		if m.UID == uid || m.Spec.Version != "v1.38.0" || agent.resetCount("ip-host") != 1 {
			return fmt.Errorf("machine %s (uid %s) version %s, host reset %d times", m.Name, m.UID, m.Spec.Version, agent.resetCount("ip-host"))
		}
		return nil
	})
}

// playBootstrapProvider gives every KubeadmConfig of the world the data
// Secret secret, as CABPK would have generated it.
func (w *world) playBootstrapProvider(secret string) {
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		list := &bootstrapv1.KubeadmConfigList{}
		if err := env.Client.List(w.ctx, list, client.InNamespace(w.ns)); err != nil {
			continue
		}
		for i := range list.Items {
			kc := &list.Items[i]
			if kc.Status.DataSecretName != "" {
				continue
			}
			kc.Status.DataSecretName, kc.Status.Initialization.DataSecretCreated = secret, ptr.To(true)
			_ = env.Client.Status().Update(w.ctx, kc)
		}
	}
}
