package reconcilers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A provisioned machine whose spec.version changes orders its host to
// upgrade in place (the claim's kubernetesVersion), only when the host's
// agent reports its version and has the new one staged; the EdgeMachine's
// KubernetesVersion condition follows the agent's report.
func TestMachineVersionOrdersAnInPlaceUpgrade(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.withCluster("up", endpoint)
	w.bootstrapSecret("up-bootstrap", cloudConfig())
	w.startAgent()
	w.host("up-host", nil)
	machine := w.machine("up-0", true, "up-bootstrap", infrav1.EdgeMachineSpec{}, "")

	versionCondition := func(status, reason, message string) func() error {
		return func() error {
			em := &infrav1.EdgeMachine{}
			if err := w.get("up-0", em); err != nil {
				return err
			}
			c := condition(em.Status.Conditions, infrav1.KubernetesVersionCondition)
			if c == nil || string(c.Status) != status || c.Reason != reason || !strings.Contains(c.Message, message) {
				return fmt.Errorf("KubernetesVersion condition %+v, want %s %s %q", c, status, reason, message)
			}
			return nil
		}
	}
	claimVersion := func() string {
		h := &infrav1.EdgeHost{}
		w.must(w.get("up-host", h))
		if h.Spec.ClaimRef == nil {
			return "<no claim>"
		}
		return h.Spec.ClaimRef.KubernetesVersion
	}
	report := func(what string, fn func(*infrav1.EdgeHostStatus)) { w.reportHost("up-host", what, fn) }
	setVersion := func(v string) {
		w.eventually("Machine version "+v, func() error {
			m := &clusterv1.Machine{}
			if err := w.get(machine.Name, m); err != nil {
				return err
			}
			patch := client.MergeFrom(m.DeepCopy())
			m.Spec.Version = v
			return env.Client.Patch(w.ctx, m, patch)
		})
	}

	// An agent that reports no version cannot be ordered.
	w.eventually("AgentCannotUpgrade", versionCondition("Unknown", infrav1.AgentCannotUpgradeReason, "reports no Kubernetes version"))
	report("the agent reports v1.36.3, v1.37.1 staged", func(s *infrav1.EdgeHostStatus) {
		s.KubernetesVersion, s.Facts.KubernetesVersions = "v1.36.3", []string{"v1.37.1"}
	})
	w.eventually("UpToDate", versionCondition("True", infrav1.KubernetesVersionUpToDateReason, ""))
	if v := claimVersion(); v != "" {
		t.Errorf("a host on its Machine's version got the order %q; none is written", v)
	}

	// A version the host does not have: nothing ordered.
	setVersion("v1.37.5")
	w.eventually("VersionNotStaged", versionCondition("False", infrav1.VersionNotStagedReason,
		"EdgeHost up-host runs v1.36.3; EdgeHost up-host cannot get v1.37.5: stage it under /opt/fleet/kubernetes/v1.37.5 on the host (staged: v1.37.1), "+
			"or create an EdgeKubernetesRelease of v1.37.5 that selects it; nothing is ordered"))
	w.consistently("no order for an unstaged version", time.Second, func() error {
		if v := claimVersion(); v != "" {
			return fmt.Errorf("ordered %q", v)
		}
		return nil
	})

	// A staged one: ordered, and followed.
	setVersion("v1.37.1")
	w.eventually("the host ordered to v1.37.1", func() error {
		if v := claimVersion(); v != "v1.37.1" {
			return fmt.Errorf("claim version %q", v)
		}
		return nil
	})
	w.eventually("Upgrading", versionCondition("False", infrav1.UpgradingReason, "upgrade from v1.36.3 to v1.37.1"))
	report("the agent at kubeadm", func(s *infrav1.EdgeHostStatus) {
		s.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.36.3", To: "v1.37.1", State: infrav1.UpgradeRunning, Step: "kubeadm upgrade apply v1.37.1 --yes"}
	})
	w.eventually("Upgrading at kubeadm", versionCondition("False", infrav1.UpgradingReason, "kubeadm upgrade apply"))
	report("the agent rolled back", func(s *infrav1.EdgeHostStatus) {
		s.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.36.3", To: "v1.37.1", State: infrav1.UpgradeRolledBack,
			Step: "restarting the kubelet", Message: "the kubelet did not start"}
	})
	w.eventually("UpgradeFailed", versionCondition("False", infrav1.UpgradeFailedReason,
		`failed and was rolled back to v1.36.3 at step "restarting the kubelet": the kubelet did not start`))
	report("the agent upgraded", func(s *infrav1.EdgeHostStatus) {
		s.KubernetesVersion = "v1.37.1"
		s.Upgrade = &infrav1.HostUpgradeStatus{From: "v1.36.3", To: "v1.37.1", State: infrav1.UpgradeSucceeded}
	})
	w.eventually("UpToDate after the upgrade", versionCondition("True", infrav1.KubernetesVersionUpToDateReason, ""))
}

// A control-plane machine's certificatesRenewBeforeDays reaches its host's
// claim, where the agent gets it as a standing order, and follows a
// change; a worker's never does (it has no control-plane certificates).
func TestRenewalWindowReachesTheClaim(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.withCluster("rn", endpoint)
	w.bootstrapSecret("rn-bootstrap", cloudConfig())
	w.startAgent()
	w.host("rn-cp-host", map[string]string{"role": "cp"})
	w.host("rn-w-host", map[string]string{"role": "worker"})
	w.machine("rn-cp", true, "rn-bootstrap", infrav1.EdgeMachineSpec{CertificatesRenewBeforeDays: 30,
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "cp"}}}, "")
	w.machine("rn-w", false, "rn-bootstrap", infrav1.EdgeMachineSpec{CertificatesRenewBeforeDays: 30,
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}}, "")
	window := func(host string, want int32) func() error {
		return func() error {
			h := &infrav1.EdgeHost{}
			if err := w.get(host, h); err != nil {
				return err
			}
			if h.Spec.ClaimRef == nil || h.Spec.ClaimRef.CertificatesRenewBeforeDays != want {
				return fmt.Errorf("claim %+v, want a renewal window of %d days", h.Spec.ClaimRef, want)
			}
			return nil
		}
	}
	w.eventually("the control plane's window on its claim", window("rn-cp-host", 30))
	w.eventually("the worker claimed, with no window", window("rn-w-host", 0))

	w.eventually("the window changed to 45 days", func() error {
		em := &infrav1.EdgeMachine{}
		if err := w.get("rn-cp", em); err != nil {
			return err
		}
		patch := client.MergeFrom(em.DeepCopy())
		em.Spec.CertificatesRenewBeforeDays = 45
		return env.Client.Patch(w.ctx, em, patch)
	})
	w.eventually("the claim follows", window("rn-cp-host", 45))

	// A second control-plane machine: renewing in place would restart
	// both at once, so neither is ordered to.
	w.host("rn-cp2-host", map[string]string{"role": "cp"})
	w.machine("rn-cp2", true, "rn-bootstrap", infrav1.EdgeMachineSpec{CertificatesRenewBeforeDays: 45,
		HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "cp"}}}, "")
	w.eventually("the first control plane's window withdrawn", window("rn-cp-host", 0))
	w.eventually("the second claimed without one", window("rn-cp2-host", 0))
}
