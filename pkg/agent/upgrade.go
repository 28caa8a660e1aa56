package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Upgrader moves a provisioned host to another Kubernetes version in place
// (kubeupgrade.Upgrader).
type Upgrader interface {
	// Running is the version of the kubelet the host runs.
	Running(ctx context.Context) (string, error)
	// Staged lists the versions the host can move to, oldest first.
	Staged() []string
	// Upgrade moves the host to `to`; bootstrapData is what provisioned it
	// (kubeadm must be told the same settings again). An error that is a
	// RollbackReporter says whether the host was put back on its old version.
	Upgrade(ctx context.Context, to, nodeName string, bootstrapData []byte, progress func(step string)) error
	// Interrupted finishes an upgrade a restart cut short, returning its
	// versions and how it ended; "" when there was none.
	Interrupted(ctx context.Context, progress func(step string)) (from, to string, err error)
	// Install puts a staged version in place on a host not yet
	// provisioned, so that its bootstrap runs that version.
	Install(ctx context.Context, version string, progress func(step string)) error
}

// RollbackReporter is a failed upgrade that knows at which step it failed
// and whether the host was rolled back to its old version.
type RollbackReporter interface {
	HostRolledBack() bool
	FailedStep() string
}

// maxStepLength is what EdgeHost status.upgrade.step holds: a longer one
// would have the hub's whole status write refused.
const maxStepLength = 256

// UseUpgrader lets the agent upgrade its host's Kubernetes when the hub
// orders another version. Call before Run.
func (a *Agent) UseUpgrader(u Upgrader) { a.upgrader = u }

// runningVersion is the host's kubelet version, "" when the agent cannot
// upgrade (the hub then never orders one).
func (a *Agent) runningVersion(ctx context.Context) string {
	if a.upgrader == nil {
		return ""
	}
	v, err := a.upgrader.Running(ctx)
	if err != nil {
		a.log.Error(err, "Reading the kubelet's version; in-place upgrades are off until it can be read")
		return ""
	}
	return v
}

// finishInterruptedUpgrade rolls back an upgrade a restart cut short, and
// learns the version of a host provisioned before versions were recorded.
func (a *Agent) finishInterruptedUpgrade(ctx context.Context) {
	if a.upgrader == nil {
		return
	}
	from, to, err := a.upgrader.Interrupted(ctx, a.upgradeProgress)
	if to != "" {
		a.log.Info("An upgrade was interrupted by a restart", "from", from, "to", to, "outcome", err)
		a.recordUpgradeEnd(from, to, err)
	}
	cur := a.Applied()
	if cur.Workload != nil && cur.Workload.State == infrav1.ProvisioningSucceeded && (cur.KubernetesVersion == "" || to != "") {
		if v := a.runningVersion(ctx); v != "" {
			_ = a.update(func(ap *state.Applied) { ap.KubernetesVersion = v })
		}
	}
}

// installForBootstrap puts the Machine's Kubernetes version in place before
// the bootstrap when the host has it staged and runs another; the hub names
// a version in the assignment only when the host reports it staged.
func (a *Agent) installForBootstrap(ctx context.Context, as *wire.Assignment, progress func(string)) error {
	want := as.KubernetesVersion
	if want == "" || a.upgrader == nil {
		return nil
	}
	if installed := a.runningVersion(ctx); installed == want || !slices.Contains(a.upgrader.Staged(), want) {
		return nil
	}
	a.log.Info("Installing the Machine's Kubernetes version before the bootstrap", "version", want)
	if err := a.upgrader.Install(ctx, want, progress); err != nil {
		return fmt.Errorf("installing Kubernetes %s before the bootstrap: %w", want, err)
	}
	return nil
}

// upgradeIfOrdered upgrades a provisioned host whose Machine wants another
// version than it runs. Each desired-state generation is one order: a
// failed upgrade is tried again only on a new one, never because the same
// generation came again with another reach, after a restart or on a new
// session.
func (a *Agent) upgradeIfOrdered(ctx context.Context, generation int64, as *wire.Assignment) {
	to := as.KubernetesVersion
	cur := a.Applied()
	if to == "" || a.upgrader == nil || cur.KubernetesVersion == "" || to == cur.KubernetesVersion {
		return
	}
	if u := cur.Upgrade; u != nil && u.To == to && u.State != infrav1.UpgradeSucceeded && cur.UpgradeGeneration == generation {
		return
	}
	from := cur.KubernetesVersion
	a.log.Info("Upgrading Kubernetes in place", "from", from, "to", to, "node", cur.NodeName)
	start := time.Now()
	_ = a.update(func(ap *state.Applied) {
		ap.Upgrade = &infrav1.HostUpgradeStatus{From: from, To: to, State: infrav1.UpgradeRunning}
		ap.UpgradeGeneration = generation
	})
	err := a.upgrader.Upgrade(ctx, to, cur.NodeName, as.BootstrapData, a.upgradeProgress)
	a.recordUpgradeEnd(from, to, err)
	if err != nil {
		a.log.Error(err, "Upgrade failed", "from", from, "to", to)
		return
	}
	a.log.Info("Upgraded Kubernetes in place", "from", from, "to", to, "took", time.Since(start).Round(time.Second).String())
	// The upgrade renewed the control-plane certificates.
	a.refreshCertificates()
}

func (a *Agent) upgradeProgress(step string) {
	a.reportStep("Upgrade step", "upgrading Kubernetes", step, func(ap *state.Applied) *string {
		if ap.Upgrade == nil {
			return nil
		}
		return &ap.Upgrade.Step
	})
}

// reportStep tells of a step of a long job of the worker's: in the
// journal (logMsg), to the hub's session (job: step), and in the status
// field stepOf finds (nil: none); it also keeps the worker counted alive.
func (a *Agent) reportStep(logMsg, job, step string, stepOf func(*state.Applied) *string) {
	a.log.Info(logMsg, "step", step)
	a.workerBusy.progress()
	a.announce(job + ": " + step)
	_ = a.update(func(ap *state.Applied) {
		if p := stepOf(ap); p != nil {
			*p = truncate(step, maxStepLength)
		}
	})
}

// recordUpgradeEnd records how an upgrade from→to ended (err nil: done).
func (a *Agent) recordUpgradeEnd(from, to string, err error) {
	_ = a.update(func(ap *state.Applied) {
		u := ap.Upgrade
		if u == nil || u.To != to {
			u = &infrav1.HostUpgradeStatus{From: from, To: to}
			ap.Upgrade = u
		}
		switch {
		case err == nil:
			u.State, u.Step, u.Message = infrav1.UpgradeSucceeded, "", ""
			ap.KubernetesVersion = to
		case rolledBack(err):
			u.State, u.Message = infrav1.UpgradeRolledBack, truncate(err.Error(), 4000)
			ap.KubernetesVersion = from
		default:
			u.State, u.Message = infrav1.UpgradeFailed, truncate(err.Error(), 4000)
		}
		// The step that failed, not that of the rollback after it.
		var r RollbackReporter
		if err != nil && errors.As(err, &r) && r.FailedStep() != "" {
			u.Step = truncate(r.FailedStep(), maxStepLength)
		}
	})
}

func rolledBack(err error) bool {
	var r RollbackReporter
	return errors.As(err, &r) && r.HostRolledBack()
}
