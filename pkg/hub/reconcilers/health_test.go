package reconcilers_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// setAgentConnected writes a host's AgentConnected as the hub's gateway
// does (the fake agent leaves connectivity alone).
func (w *world) setAgentConnected(name string, status metav1.ConditionStatus) {
	w.t.Helper()
	w.must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(name, h); err != nil {
			return err
		}
		conditions.Set(h, metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: status, Reason: "Test"})
		return env.Client.Status().Update(w.ctx, h)
	}))
}

// The machine on a host whose agent is gone is reported on the EdgeMachine
// (HostAgentConnected False, Ready False), Cluster API mirrors that into the
// Machine's InfrastructureReady, and the real MachineHealthCheck reconciler
// has the MachineSet replace the Machine on the spare host. The dead host
// stays Deprovisioning — never handed out — until its agent is back and has
// reset it.
func TestAgentGoneMachineIsReplaced(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for _, h := range []string{"cp", "w0", "w1"} {
		role := "worker"
		if h == "cp" {
			role = "cp"
		}
		w.host(h, map[string]string{"role": role})
		w.setAgentConnected(h, metav1.ConditionTrue)
	}
	w.withCluster("heal", endpoint)
	w.bootstrapSecret("heal-bootstrap", cloudConfig())
	agent := w.startAgent()
	// A control-plane Machine with a Node initialises the control plane:
	// MachineHealthCheck judges workers only after that.
	w.machine("heal-cp", true, "heal-bootstrap", infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "cp"}}}, "")
	w.machineDeployment("heal", 1, "heal-bootstrap", infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}})
	w.must(env.Client.Create(w.ctx, &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: "heal", Namespace: w.ns},
		Spec: clusterv1.MachineHealthCheckSpec{ClusterName: "heal",
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet.test/md": "heal"}},
			Checks: clusterv1.MachineHealthCheckChecks{NodeStartupTimeoutSeconds: ptr.To[int32](0),
				UnhealthyMachineConditions: []clusterv1.UnhealthyMachineCondition{{Type: clusterv1.MachineInfrastructureReadyCondition,
					Status: metav1.ConditionFalse, TimeoutSeconds: ptr.To[int32](1)}}},
			Remediation: clusterv1.MachineHealthCheckRemediation{TriggerIf: clusterv1.MachineHealthCheckRemediationTriggerIf{
				UnhealthyLessThanOrEqualTo: ptr.To(intstr.FromString("100%"))}},
		},
	}))

	var dead, first string
	w.eventually("the worker Running on a host, HostAgentConnected True", func() error {
		m, err := w.workerMachine()
		if err != nil {
			return err
		}
		if m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return fmt.Errorf("machine %s is %s", m.Name, m.Status.Phase)
		}
		em := &infrav1.EdgeMachine{}
		if err := w.get(m.Spec.InfrastructureRef.Name, em); err != nil {
			return err
		}
		if c := conditions.Get(em, infrav1.HostAgentConnectedCondition); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("HostAgentConnected %+v", c)
		}
		dead, first = em.Status.HostRef, m.Name
		return nil
	})

	// The host dies: its agent never resets anything again.
	agent.reset.Store(false)
	w.setAgentConnected(dead, metav1.ConditionFalse)
	w.eventually("the EdgeMachine and Machine report the agent gone", func() error {
		m := &clusterv1.Machine{}
		if err := w.get(first, m); err != nil {
			return err
		}
		em := &infrav1.EdgeMachine{}
		if err := w.get(m.Spec.InfrastructureRef.Name, em); err != nil {
			return err
		}
		if c := conditions.Get(em, infrav1.HostAgentConnectedCondition); c == nil || c.Reason != infrav1.AgentDisconnectedReason {
			return fmt.Errorf("HostAgentConnected %+v", c)
		}
		if !conditions.IsFalse(em, infrav1.ReadyCondition) {
			return fmt.Errorf("EdgeMachine Ready %+v", conditions.Get(em, infrav1.ReadyCondition))
		}
		return nil
	})
	var spare string
	w.eventually("the Machine replaced by one Running on the spare host", func() error {
		m, err := w.workerMachine()
		if err != nil {
			return err
		}
		if m.Name == first || m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return fmt.Errorf("machine %s is %s", m.Name, m.Status.Phase)
		}
		em := &infrav1.EdgeMachine{}
		if err := w.get(m.Spec.InfrastructureRef.Name, em); err != nil {
			return err
		}
		if spare = em.Status.HostRef; spare == dead {
			return errors.New("the replacement holds the dead host")
		}
		return nil
	})
	w.consistently("the dead host stays Deprovisioning while its agent is gone", 3*time.Second, func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(dead, h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostDeprovisioning || h.Spec.ClaimRef != nil {
			return fmt.Errorf("host %s is %s, claimed by %v", dead, h.Status.Phase, h.Spec.ClaimRef)
		}
		return nil
	})

	// The agent is back: it resets the host, which returns to the pool.
	w.setAgentConnected(dead, metav1.ConditionTrue)
	agent.reset.Store(true)
	w.eventually("the dead host reset and Available", func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(dead, h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostAvailable {
			return fmt.Errorf("host %s is %s", dead, h.Status.Phase)
		}
		return nil
	})
	if n := agent.resetCount(dead); n != 1 {
		t.Errorf("host %s reset %d times, want 1", dead, n)
	}
}

// workerMachine returns the one worker Machine that is not being deleted.
func (w *world) workerMachine() (*clusterv1.Machine, error) {
	l := &clusterv1.MachineList{}
	if err := env.Client.List(w.ctx, l, client.InNamespace(w.ns), client.MatchingLabels{"fleet.test/md": "heal"}); err != nil {
		return nil, err
	}
	var live []*clusterv1.Machine
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp.IsZero() {
			live = append(live, &l.Items[i])
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d live worker machines", len(live))
	}
	return live[0], nil
}
