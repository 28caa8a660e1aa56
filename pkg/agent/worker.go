package agent

import (
	"context"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/facts"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// worker applies desired states one at a time, in generation order. It
// tells the watchdog when it is busy and each time it makes progress.
func (a *Agent) worker(ctx context.Context) {
	a.finishInterruptedUpgrade(ctx)
	a.finishInterruptedRenewal(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-a.desired:
			a.workerBusy.progress()
			a.apply(ctx, d)
			a.workerBusy.idle()
		case <-a.renewals:
			a.workerBusy.progress()
			a.renewIfDue(ctx)
			a.workerBusy.idle()
		}
	}
}

// handToWorker gives the worker the newest desired state. The one waiting
// is replaced only by a state of the same or a newer generation (or of
// another EdgeHost incarnation): desired states that raced through the
// loop out of order must not hide a newer one behind an older one.
func (a *Agent) handToWorker(d *wire.DesiredState) {
	select {
	case waiting := <-a.desired:
		if waiting.HostUID == d.HostUID && waiting.Generation > d.Generation {
			d = waiting
		}
	default:
	}
	a.desired <- d
}

func (a *Agent) apply(ctx context.Context, d *wire.DesiredState) {
	a.followIncarnation(d)
	cur := a.Applied()
	if d.Generation < cur.Generation {
		a.log.Info("Ignoring an older desired state", "generation", d.Generation, "applied", cur.Generation)
		return
	}
	if d.Generation == cur.Generation && reflect.DeepEqual(d, a.done) {
		// What the hub sends on every new session, already done: after an
		// outage a fleet reconnects at once, and each agent would write
		// its state files (with fsyncs) and gather its facts again for
		// nothing.
		return
	}
	a.done = nil
	_ = a.store.SaveDesired(d)
	if !a.act(ctx, d, cur.Workload) {
		return
	}
	if a.update(func(ap *state.Applied) { ap.Generation = d.Generation }) == nil {
		a.done = d
	}
}

// act carries out d on a host that runs w (nil: clean); false when a reset
// failed. Only an explicit order resets the host: a Deprovision, or an
// assignment for another claim once the hub has released this one. A desired
// state that says nothing about the workload (a new or restored EdgeHost
// that does not know it) leaves it running; the status reports it, so the
// hub can tell the operator.
func (a *Agent) act(ctx context.Context, d *wire.DesiredState, w *infrav1.HostProvisioningStatus) bool {
	switch {
	case d.Deprovision:
		if w != nil {
			return a.reset(ctx, w.ClaimUID)
		}
	case d.Assignment != nil && w != nil && w.ClaimUID == d.Assignment.ClaimUID && w.State == infrav1.ProvisioningSucceeded:
		// Provisioned for this Machine: a bootstrap never runs twice, but
		// the Machine may want another Kubernetes version, and its
		// certificates renewed.
		a.upgradeIfOrdered(ctx, d.Generation, d.Assignment)
		a.keepRenewalOrder(d.Assignment)
		a.renewIfDue(ctx)
	case d.Assignment != nil && w != nil && w.ClaimUID == d.Assignment.ClaimUID && w.State != infrav1.ProvisioningRunning:
		// Failed for this Machine: a bootstrap never runs twice. Just
		// record that this generation is seen.
	case d.Assignment != nil && w != nil && w.ClaimUID != d.Assignment.ClaimUID:
		// The hub hands out only hosts it has seen reset; one that does not
		// know this workload is out of step (restored from an older backup),
		// and guessing would wipe a running node.
		a.log.Info("Keeping the workload: the hub assigned another claim without releasing this one first",
			"claim", w.ClaimUID, "assigned", d.Assignment.ClaimUID)
	case d.Assignment != nil:
		a.provision(ctx, d.Assignment)
	case w != nil:
		a.log.Info("Keeping the workload: the hub's desired state does not mention it (no release, no deprovision order)",
			"claim", w.ClaimUID, "generation", d.Generation)
	}
	return true
}

// followIncarnation starts the generations afresh when the desired state
// comes from another incarnation of the EdgeHost (a hub restored from a
// backup re-creates it, and its generations count from 1 again); the
// workload stays. A record the state directory refuses now is written by
// housekeeping once it can.
func (a *Agent) followIncarnation(d *wire.DesiredState) {
	if d.HostUID == "" || d.HostUID == a.Applied().HostUID {
		return
	}
	a.log.Info("The hub's EdgeHost for this host is a new incarnation (re-created, e.g. restored from a backup): generations start again",
		"hostUID", d.HostUID, "was", a.Applied().HostUID, "generation", a.Applied().Generation)
	a.done = nil
	_ = a.update(func(ap *state.Applied) { ap.HostUID, ap.Generation = d.HostUID, 0 })
}

func (a *Agent) provision(ctx context.Context, as *wire.Assignment) {
	a.log.Info("Provisioning", "machine", as.MachineName, "claim", as.ClaimUID)
	if err := a.update(func(ap *state.Applied) {
		ap.Workload = &infrav1.HostProvisioningStatus{ClaimUID: as.ClaimUID, State: infrav1.ProvisioningRunning}
	}); err != nil {
		// Without the "running" mark on disk a crash could run the
		// bootstrap twice: do not start it.
		_ = a.update(func(ap *state.Applied) {
			ap.Workload.State = infrav1.ProvisioningFailed
			ap.Workload.Message = "cannot record the bootstrap's start in the state directory: " + err.Error()
		})
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	a.provMu.Lock()
	a.provCancel, a.provClaim = cancel, as.ClaimUID
	a.provMu.Unlock()
	defer func() {
		a.provMu.Lock()
		a.provCancel, a.provClaim = nil, ""
		a.provMu.Unlock()
		cancel()
	}()
	start := time.Now()
	step := func(step string) {
		// One line per step: the journal shows where a bootstrap is and
		// how long each step took.
		a.log.Info("Bootstrap step", "machine", as.MachineName, "step", step)
		a.workerBusy.progress()
		a.announce("provisioning " + as.MachineName + ": " + step)
		_ = a.update(func(ap *state.Applied) {
			if ap.Workload != nil {
				ap.Workload.Step = step
			}
		})
	}
	var res Result
	err := a.installForBootstrap(pctx, as, step)
	if err == nil {
		res, err = a.prov.Provision(pctx, as, step)
	}
	version := ""
	if err == nil {
		version = a.runningVersion(ctx)
	}
	_ = a.update(func(ap *state.Applied) {
		if err != nil {
			ap.Workload.State = infrav1.ProvisioningFailed
			ap.Workload.Message = truncate(err.Error(), 4000)
			if pctx.Err() != nil && ctx.Err() == nil {
				ap.Workload.Message = truncate("bootstrap interrupted: the host was released; "+err.Error(), 4000)
			}
			return
		}
		ap.Workload.State = infrav1.ProvisioningSucceeded
		ap.Workload.Message = ""
		ap.ProviderID, ap.NodeName = res.ProviderID, res.NodeName
		ap.CertificatesExpiryDate = certExpiry(res.CertificatesExpiry)
		ap.KubernetesVersion = version
	})
	if err != nil {
		a.log.Error(err, "Provisioning failed", "machine", as.MachineName)
		return
	}
	a.log.Info("Provisioned", "machine", as.MachineName, "took", time.Since(start).Round(time.Millisecond).String())
}

func (a *Agent) reset(ctx context.Context, claim types.UID) bool {
	a.log.Info("Resetting host", "claim", claim)
	a.workerBusy.progress()
	_ = a.update(func(ap *state.Applied) {
		if ap.Workload != nil {
			ap.Workload.State = infrav1.ProvisioningResetting
		}
	})
	start := time.Now()
	if err := a.prov.Reset(ctx, claim, func(step string) {
		a.log.Info("Reset step", "claim", claim, "step", step)
		a.workerBusy.progress()
	}); err != nil {
		a.log.Error(err, "Reset failed", "claim", claim)
		_ = a.update(func(ap *state.Applied) {
			if ap.Workload != nil {
				ap.Workload.State = infrav1.ProvisioningResetFailed
				ap.Workload.Message = truncate(err.Error(), 4000)
			}
		})
		return false
	}
	a.log.Info("Host reset", "claim", claim, "took", time.Since(start).Round(time.Millisecond).String())
	// The host is reset whether or not the state directory takes the
	// record now: housekeeping writes it once it can, and until then a
	// restart only resets the host again.
	_ = a.update(func(ap *state.Applied) {
		ap.Workload, ap.ProviderID, ap.NodeName, ap.CertificatesExpiryDate = nil, "", "", nil
		ap.KubernetesVersion, ap.Upgrade, ap.UpgradeGeneration = "", nil, 0
		ap.CertificatesRenewBeforeDays, ap.CertificatesRenewal, ap.CertificatesRenewalHeld = 0, nil, 0
	})
	return true
}

// interruptIfReleased cancels the bootstrap in progress when a newer
// desired state no longer assigns its claim: a deleted Machine must not
// keep its host busy for up to a command timeout.
func (a *Agent) interruptIfReleased(d *wire.DesiredState) {
	a.provMu.Lock()
	defer a.provMu.Unlock()
	if a.provCancel == nil || d.Generation <= a.Applied().Generation {
		return
	}
	if d.Assignment == nil || d.Assignment.ClaimUID != a.provClaim {
		a.log.Info("Interrupting the bootstrap: its claim was released", "claim", a.provClaim)
		a.provCancel()
	}
}

// update changes the applied state, persists it, and lets the status
// manager send the new full status. The change holds in memory (and is
// reported) even when it cannot be persisted; saveUnsaved retries.
func (a *Agent) update(fn func(*state.Applied)) error {
	a.saveMu.Lock()
	a.mu.Lock()
	fn(&a.applied)
	snapshot := a.applied.DeepCopy()
	a.mu.Unlock()
	err := a.save(snapshot)
	a.saveMu.Unlock()
	a.refreshStatus()
	return err
}

// save writes snapshot and records whether that worked; saveMu held.
func (a *Agent) save(snapshot state.Applied) error {
	err := a.store.SaveApplied(snapshot)
	was := a.unsaved.Load()
	switch {
	case err != nil:
		if was == nil {
			a.log.Error(err, "Cannot record what the agent did in the state directory; retrying until it can")
		}
		why := err.Error()
		a.unsaved.Store(&why)
	case was != nil:
		a.log.Info("Recorded what the agent did in the state directory again")
		a.unsaved.Store(nil)
	}
	return err
}

// saveUnsaved writes the applied state again after a failed write: a
// restart must find what was done, not what was under way (a finished
// bootstrap read back as running is reported as interrupted).
func (a *Agent) saveUnsaved() {
	if a.unsaved.Load() == nil {
		return
	}
	a.saveMu.Lock()
	err := a.save(a.Applied())
	a.saveMu.Unlock()
	if err == nil {
		a.refreshStatus()
	}
}

func (a *Agent) refreshStatus() {
	// Several sources refresh (the worker, the link source, the resync
	// timer): one at a time, so an older snapshot is never set last.
	a.refreshMu.Lock()
	defer a.refreshMu.Unlock()
	cur := a.Applied()
	hostFacts := facts.Read(a.cfg.RootDir)
	hostFacts.AgentVersion = a.cfg.Version
	if a.upgrader != nil {
		hostFacts.KubernetesVersions = a.upgrader.Staged()
	}
	st := &wire.Status{
		ObservedGeneration:     cur.Generation,
		Facts:                  hostFacts,
		Addresses:              facts.Addresses(hostFacts.Hostname),
		Provisioning:           cur.Workload,
		ProviderID:             cur.ProviderID,
		NodeName:               cur.NodeName,
		CertificatesExpiryDate: cur.CertificatesExpiryDate,
		Link:                   a.link.Load(),
		KubernetesVersion:      cur.KubernetesVersion,
		Upgrade:                cur.Upgrade,
		CertificatesRenewal:    cur.CertificatesRenewal,
		Staging:                a.stagingStatus(),
	}
	st.AgentRelease = a.releaseStatus()
	if why := a.unsaved.Load(); why != nil {
		st.StateUnwritable = truncate(*why, 1000)
	}
	if skew := time.Duration(a.clockSkew.Load()); skew != 0 {
		st.ClockSkew = &metav1.Duration{Duration: skew}
	}
	a.status.Set(st)
}

// learnClockSkew takes how far this host's clock is off the hub's, as a
// session's start measured it, and reports it when that changed. It is
// rounded to 10 s so that a session's round trip does not make news.
func (a *Agent) learnClockSkew(skew time.Duration) {
	skew = skew.Round(10 * time.Second)
	if skew.Abs() < wire.MinClockSkew {
		skew = 0
	}
	if a.clockSkew.Swap(int64(skew)) != int64(skew) {
		a.refreshStatus()
	}
}

// truncate fits s into n bytes keeping both ends: the first line says
// which step failed and the command, the end of its output says why
// (kubeadm prints its errors last).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const cut = "\n[…]\n"
	head := s[:n/4]
	if i := strings.IndexByte(head, '\n'); i >= 0 {
		head = head[:i]
	}
	tail := s[len(s)-(n-len(head)-len(cut)):]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return strings.ToValidUTF8(head, "") + cut + tail
}

func certExpiry(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(*t)
	return &mt
}
