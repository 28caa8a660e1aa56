package edgemachine

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/edgefleet/fleet/pkg/contract/hostupgrade"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// reconcileKubernetesVersion orders a provisioned host to run its
// Machine's spec.version when it runs another one and can get it, and says
// how far the host is. A Machine's version changes when an operator edits a
// plain control-plane Machine (`kubectl fleet upgrade cluster`) or when
// Cluster API updates a Machine in place; owners that replace Machines
// never change it. The order is the claim's kubernetesVersion, which the
// agent receives with its assignment.
func (r *Reconciler) reconcileKubernetesVersion(ctx context.Context, s *scope) (bool, error) {
	em, host, want := s.edgeMachine, s.host, s.machine.Spec.Version
	running := host.Status.KubernetesVersion
	set := func(status metav1.ConditionStatus, reason, msg string) {
		r.setStep(em, host, metav1.Condition{Type: infrav1.KubernetesVersionCondition, Status: status, Reason: reason, Message: msg})
	}
	switch {
	case want == "":
		conditions.Delete(em, infrav1.KubernetesVersionCondition)
		return false, nil
	case running == "":
		set(metav1.ConditionUnknown, infrav1.AgentCannotUpgradeReason, fmt.Sprintf(
			"The agent of EdgeHost %s reports no Kubernetes version (a fleet-agent too old, or not run by systemd): "+
				"it cannot upgrade in place, and nothing is ordered", host.Name))
		return false, nil
	case running == want && (host.Spec.ClaimRef.KubernetesVersion == want || host.Spec.ClaimRef.KubernetesVersion == ""):
		// No order is needed, so none is written: most hosts never get one.
		set(metav1.ConditionTrue, infrav1.KubernetesVersionUpToDateReason, "")
		return false, nil
	case running != want && hostupgrade.Staged(host, want) != nil:
		set(metav1.ConditionFalse, infrav1.VersionNotStagedReason, fmt.Sprintf("EdgeHost %s runs %s; %v; nothing is ordered",
			host.Name, running, hostupgrade.Staged(host, want)))
		return false, nil
	}
	if host.Spec.ClaimRef.KubernetesVersion != want {
		updated := host.DeepCopy()
		updated.Spec.ClaimRef.KubernetesVersion = want
		if err := r.Client.Update(ctx, updated); err != nil {
			return true, fmt.Errorf("ordering EdgeHost %s to run Kubernetes %s: %w", host.Name, want, err)
		}
		s.host = updated
		if running == want {
			set(metav1.ConditionTrue, infrav1.KubernetesVersionUpToDateReason, "")
			return false, nil
		}
		set(metav1.ConditionFalse, infrav1.UpgradingReason, fmt.Sprintf("Ordered EdgeHost %s to upgrade from %s to %s in place", host.Name, running, want))
		return false, nil
	}
	u := host.Status.Upgrade
	switch {
	case running == want:
		set(metav1.ConditionTrue, infrav1.KubernetesVersionUpToDateReason, "")
	case u != nil && u.To == want && (u.State == infrav1.UpgradeFailed || u.State == infrav1.UpgradeRolledBack):
		what := "failed"
		if u.State == infrav1.UpgradeRolledBack {
			what = "failed and was rolled back to " + u.From
		}
		set(metav1.ConditionFalse, infrav1.UpgradeFailedReason, fmt.Sprintf("The upgrade of EdgeHost %s to %s %s at step %q: %s",
			host.Name, want, what, u.Step, u.Message))
	case u != nil && u.To == want && u.State == infrav1.UpgradeRunning:
		set(metav1.ConditionFalse, infrav1.UpgradingReason, fmt.Sprintf("EdgeHost %s is upgrading from %s to %s: %s", host.Name, u.From, want, u.Step))
	default:
		set(metav1.ConditionFalse, infrav1.UpgradingReason, fmt.Sprintf("Ordered EdgeHost %s to upgrade from %s to %s in place; waiting for its agent", host.Name, running, want))
	}
	return false, nil
}
