package agent

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/agent/state"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// syncLoop is the one loop every source feeds: it hands each desired state
// to the reach owner, to the interrupt of a released bootstrap and to the
// worker; link reports to the status; the resync timer re-sends the full
// status; housekeeping judges whether the agent is alive and writes again
// a state that a full disk kept from being recorded.
func (a *Agent) syncLoop(ctx context.Context) {
	resync := time.NewTicker(a.cfg.ResyncInterval)
	defer resync.Stop()
	housekeeping := time.NewTicker(a.housekeeping)
	defer housekeeping.Stop()
	certs := time.NewTicker(a.cfg.CertificatesCheckInterval)
	defer certs.Stop()
	a.checkHealth(time.Now())
	a.refreshCertificates()
	select {
	case a.renewals <- struct{}{}:
	default:
	}
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-a.updates:
			a.handleUpdate(u)
		case h := <-a.links:
			a.link.Store(h)
			a.refreshStatus()
		case <-resync.C:
			// Facts may have changed; the full status is re-sent either way.
			a.refreshStatus()
			a.status.Resend()
		case <-housekeeping.C:
			a.checkHealth(time.Now())
			a.saveUnsaved()
			if a.trialExpired(time.Now()) {
				return
			}
		case <-certs.C:
			a.refreshCertificates()
			// The worker renews them if they are due: it is the one room
			// that changes the host.
			select {
			case a.renewals <- struct{}{}:
			default:
			}
		}
	}
}

// refreshCertificates reads the certificates' expiry of a provisioned host
// again and reports it when it changed: after a renewal the Machine must
// not keep the old date, nor a KubeadmControlPlane roll it over for it.
func (a *Agent) refreshCertificates() {
	cr, ok := a.prov.(CertificatesReader)
	if !ok {
		return
	}
	cur := a.Applied()
	if cur.Workload == nil || cur.Workload.State != infrav1.ProvisioningSucceeded {
		return
	}
	expiry := certExpiry(cr.CertificatesExpiry())
	if expiry.Equal(cur.CertificatesExpiryDate) {
		return
	}
	a.log.Info("Certificates' expiry changed", "was", cur.CertificatesExpiryDate, "now", expiry)
	_ = a.update(func(ap *state.Applied) {
		// The claim may have ended meanwhile; its reset clears the date.
		if ap.Workload != nil && ap.Workload.State == infrav1.ProvisioningSucceeded {
			ap.CertificatesExpiryDate = expiry
		}
	})
}

// handleUpdate dispatches what the session source sent.
func (a *Agent) handleUpdate(u session.Update) {
	switch u.Op {
	case session.OpConnected:
		a.status.Attach(u.Report)
		a.attachRelease(u.Send)
		a.archives.attach(u.Send)
	case session.OpDisconnected:
		a.status.Attach(nil)
		a.attachRelease(nil)
		a.archives.attach(nil)
	case session.OpDesired:
		d := u.Desired
		if a.OnDesired != nil {
			a.OnDesired(d)
		}
		// The hosts entry first: the bootstrap the worker may start
		// resolves the endpoint through it. Only from a desired state the
		// worker will act on: tunnels must not follow a claim the host
		// does not hold.
		if why := a.refusesReach(d); why == "" {
			a.reach.Set(d)
		} else {
			a.log.Info("Keeping the cluster endpoint: "+why, "generation", d.Generation)
		}
		a.setStage(d.Stage)
		a.setRelease(d.AgentRelease)
		a.interruptIfReleased(d)
		// Stage orders are the staging room's: a change to them is no
		// news for the worker.
		wd := *d
		wd.Stage, wd.AgentRelease = nil, nil
		a.handToWorker(&wd)
		// A desired state means the session works end to end: the gate
		// of a release on trial.
		a.commitTrial()
	}
}

// refusesReach says why the worker would not act on d's assignment (""
// when it would): an older generation of the same EdgeHost, or an
// assignment for another claim than the workload the host holds.
func (a *Agent) refusesReach(d *wire.DesiredState) string {
	cur := a.Applied()
	switch w := cur.Workload; {
	case (d.HostUID == "" || d.HostUID == cur.HostUID) && d.Generation < cur.Generation:
		return "the desired state is older than the one acted on"
	case w != nil && d.Assignment != nil && w.ClaimUID != d.Assignment.ClaimUID:
		return "the hub assigned another claim than the one this host holds"
	}
	return ""
}

// stallLimits bounds how long each worker may go without progress before
// the agent counts as stuck.
type stallLimits struct {
	// worker: one step of a bootstrap or a reset runs one command, and the
	// provisioner's runners time a command out after 30 minutes at most.
	worker time.Duration
	// status: one report is bounded by the session's write timeout.
	status time.Duration
}

var defaultStallLimits = stallLimits{worker: time.Hour, status: time.Minute}

// checkHealth records now as the last healthy moment if no worker is stuck:
// the loop got here, so it goes round.
func (a *Agent) checkHealth(now time.Time) {
	stuck := ""
	if since := a.workerBusy.since(); !since.IsZero() && now.Sub(since) > a.stallLimits.worker {
		stuck = "the provisioning worker made no progress since " + since.Format(time.RFC3339)
	} else if since := a.status.SendingSince(); !since.IsZero() && now.Sub(since) > a.stallLimits.status {
		stuck = "the status manager has been sending since " + since.Format(time.RFC3339)
	}
	if stuck != "" {
		if !a.stuck {
			a.log.Info("A worker is stuck; the watchdog is no longer pinged", "reason", stuck)
		}
		a.stuck = true
		return
	}
	a.stuck = false
	a.lastHealthy.Store(&now)
}

// LastHealthy is when the sync loop last went round with every worker idle
// or making progress: the systemd watchdog pings only while it is recent.
func (a *Agent) LastHealthy() time.Time {
	if t := a.lastHealthy.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// busySince tracks a worker: zero while it is idle, else when it last
// started or made progress on its work. Times keep their monotonic reading:
// an edge box's clock is often stepped by NTP during its bootstrap, and a
// wall-clock jump must not make a working worker look stuck.
type busySince struct{ t atomic.Pointer[time.Time] }

func (b *busySince) progress() {
	now := time.Now()
	b.t.Store(&now)
}

func (b *busySince) idle() { b.t.Store(nil) }

func (b *busySince) since() time.Time {
	if t := b.t.Load(); t != nil {
		return *t
	}
	return time.Time{}
}
