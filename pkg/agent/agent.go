package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/yamux"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/facts"
	"github.com/edgefleet/fleet/pkg/agent/reach"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/agent/status"
	"github.com/edgefleet/fleet/pkg/agent/tunnel"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Agent is one fleet-agent.
type Agent struct {
	cfg   Config
	store state.Store
	prov  Provisioner
	log   logr.Logger

	// desired carries the newest desired state from the session source to
	// the worker; only the latest matters (level-triggered).
	desired chan *wire.DesiredState

	status *status.Manager

	mu      sync.Mutex
	applied state.Applied

	// The bootstrap in progress, so a release can interrupt it.
	provMu     sync.Mutex
	provCancel context.CancelFunc
	provClaim  types.UID

	// OnStatus, when set, hears a one-line status on every connection
	// change and provisioning step (systemd's STATUS=).
	OnStatus func(string)
	// OnDesired, when set, hears every desired state as it arrives from
	// the hub, before the worker acts on it (the scale benchmarks time
	// pushes with it). It must not block.
	OnDesired func(*wire.DesiredState)
	// done is the last desired state the worker acted on in full (the one
	// in the state directory at start); only the worker touches it.
	done *wire.DesiredState
	// lastLoop is when the sync loop last went round (UnixNano), for the
	// watchdog.
	lastLoop atomic.Int64

	// Link health: the probe (nil without one), why there is none, and
	// the last window's report. mux is the current session, for pings.
	linkProbe       LinkCounter
	linkUnavailable string
	linkEnabled     bool
	link            atomic.Pointer[infrav1.LinkHealth]
	mux             atomic.Pointer[yamux.Session]
	refreshMu       sync.Mutex

	// Edge reach: how this host's cluster endpoint is reached at the site,
	// and the tunnels the hub opens to it.
	reach   *reach.Owner
	tunnels *tunnel.Server

	// Counters for tests and metrics.
	enrollments atomic.Int64
	sessions    atomic.Int64
	connected   atomic.Bool
	rotations   atomic.Int64
}

// MaxTunnels bounds the tunnels one agent carries at once.
const MaxTunnels = tunnel.MaxOpen

// New makes an agent. cfg must be Completed and Validated.
func New(cfg Config, prov Provisioner, log logr.Logger) *Agent {
	a := &Agent{
		cfg:     cfg,
		store:   state.Store{Dir: cfg.StateDir},
		prov:    prov,
		log:     log,
		desired: make(chan *wire.DesiredState, 1),
		status:  status.New(),
	}
	a.reach = reach.NewOwner(cfg.RootDir, log)
	a.tunnels = &tunnel.Server{Targets: a.reach.DialTargets, Log: log}
	return a
}

// LastLoop is when the sync loop last went round.
func (a *Agent) LastLoop() time.Time { return time.Unix(0, a.lastLoop.Load()) }

func (a *Agent) announce(text string) {
	if a.OnStatus != nil {
		a.OnStatus(text)
	}
}

// Enrollments counts enrollments this process made.
func (a *Agent) Enrollments() int64 { return a.enrollments.Load() }

// Sessions counts sessions this process opened.
func (a *Agent) Sessions() int64 { return a.sessions.Load() }

// Connected reports whether a session is open now.
func (a *Agent) Connected() bool { return a.connected.Load() }

// Rotations counts certificate rotations.
func (a *Agent) Rotations() int64 { return a.rotations.Load() }

// Applied returns a copy of what the agent has applied.
func (a *Agent) Applied() state.Applied {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied.DeepCopy()
}

// Run runs the agent until ctx ends. Local initialisation (state, facts)
// never waits for the hub; ready is called once it is done, so an offline
// site still boots.
func (a *Agent) Run(ctx context.Context, ready func()) error {
	applied, err := a.store.LoadApplied()
	if err != nil {
		return err
	}
	if w := applied.Workload; w != nil && w.State == infrav1.ProvisioningRunning {
		// The agent stopped in the middle of a bootstrap. Running it again
		// could do half of it twice; say where it stopped instead.
		w.State = infrav1.ProvisioningFailed
		w.Message = "fleet-agent restarted during the bootstrap"
		if w.Step != "" {
			w.Message += " at step " + w.Step
		}
		w.Message += "; delete the Machine to replace it"
		if err := a.store.SaveApplied(applied); err != nil {
			return err
		}
		a.log.Info("Bootstrap was interrupted by a restart", "claim", w.ClaimUID, "step", w.Step)
	}
	a.mu.Lock()
	a.applied = applied
	a.mu.Unlock()
	a.done = a.store.LoadDesired()
	if a.done != nil {
		// The endpoint given with the assignment holds across restarts.
		a.reach.Restore(a.done)
	}
	a.refreshStatus()
	if ready != nil {
		ready()
	}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.worker(ctx) }()
	go func() { defer wg.Done(); a.sessionSource(ctx) }()
	if a.linkEnabled && a.cfg.LinkInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); a.linkSource(ctx) }()
	}

	resync := time.NewTicker(a.cfg.ResyncInterval)
	defer resync.Stop()
	// The loop goes round at least every second, so its liveness can be
	// judged (the watchdog pings only while it does).
	heartbeat := time.NewTicker(time.Second)
	defer heartbeat.Stop()
	a.lastLoop.Store(time.Now().UnixNano())
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-heartbeat.C:
			a.lastLoop.Store(time.Now().UnixNano())
		case <-resync.C:
			a.lastLoop.Store(time.Now().UnixNano())
			// Facts may have changed; the full status is re-sent either way.
			a.refreshStatus()
			a.status.Resend()
		}
	}
}

// worker applies desired states one at a time, in generation order.
func (a *Agent) worker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-a.desired:
			a.apply(ctx, d)
		}
	}
}

func (a *Agent) apply(ctx context.Context, d *wire.DesiredState) {
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
	switch {
	case d.Assignment != nil:
		w := cur.Workload
		if w != nil && w.ClaimUID == d.Assignment.ClaimUID && w.State != infrav1.ProvisioningRunning {
			// Already done (or failed) for this Machine: a bootstrap never
			// runs twice. Just record that this generation is seen.
			break
		}
		if w != nil && w.ClaimUID != d.Assignment.ClaimUID {
			if !a.reset(ctx, w.ClaimUID) {
				return
			}
		}
		a.provision(ctx, d.Assignment)
	case cur.Workload != nil:
		// Released (explicitly, or by an empty desired state): reset.
		if !a.reset(ctx, cur.Workload.ClaimUID) {
			return
		}
	}
	if a.update(func(ap *state.Applied) { ap.Generation = d.Generation }) == nil {
		a.done = d
	}
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
	res, err := a.prov.Provision(pctx, as, func(step string) {
		a.announce("provisioning " + as.MachineName + ": " + step)
		_ = a.update(func(ap *state.Applied) {
			if ap.Workload != nil {
				ap.Workload.Step = step
			}
		})
	})
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
	})
	if err != nil {
		a.log.Error(err, "Provisioning failed", "machine", as.MachineName)
	}
}

func (a *Agent) reset(ctx context.Context, claim types.UID) bool {
	a.log.Info("Resetting host", "claim", claim)
	_ = a.update(func(ap *state.Applied) {
		if ap.Workload != nil {
			ap.Workload.State = infrav1.ProvisioningResetting
		}
	})
	if err := a.prov.Reset(ctx, claim); err != nil {
		a.log.Error(err, "Reset failed", "claim", claim)
		_ = a.update(func(ap *state.Applied) {
			if ap.Workload != nil {
				ap.Workload.State = infrav1.ProvisioningResetFailed
				ap.Workload.Message = truncate(err.Error(), 4000)
			}
		})
		return false
	}
	return a.update(func(ap *state.Applied) {
		ap.Workload, ap.ProviderID, ap.NodeName, ap.CertificatesExpiryDate = nil, "", "", nil
	}) == nil
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
// manager send the new full status.
func (a *Agent) update(fn func(*state.Applied)) error {
	a.mu.Lock()
	fn(&a.applied)
	snapshot := a.applied.DeepCopy()
	a.mu.Unlock()
	err := a.store.SaveApplied(snapshot)
	if err != nil {
		a.log.Error(err, "Saving state")
	}
	a.refreshStatus()
	return err
}

func (a *Agent) refreshStatus() {
	// Several sources refresh (the worker, the link source, the resync
	// timer): one at a time, so an older snapshot is never set last.
	a.refreshMu.Lock()
	defer a.refreshMu.Unlock()
	cur := a.Applied()
	hostFacts := facts.Read(a.cfg.RootDir)
	st := &wire.Status{
		ObservedGeneration:     cur.Generation,
		Facts:                  hostFacts,
		Addresses:              facts.Addresses(hostFacts.Hostname),
		Provisioning:           cur.Workload,
		ProviderID:             cur.ProviderID,
		NodeName:               cur.NodeName,
		CertificatesExpiryDate: cur.CertificatesExpiryDate,
		Link:                   a.link.Load(),
	}
	a.status.Set(st)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// backoff returns the delay before reconnect attempt n (from 0): full
// jitter over an exponential ceiling, so a fleet whose hub restarted does
// not come back in one wave.
func backoff(n int, max time.Duration) time.Duration {
	ceiling := time.Second << min(n, 10)
	if ceiling > max {
		ceiling = max
	}
	return time.Duration(rand.Int64N(int64(ceiling)) + int64(100*time.Millisecond))
}

// rotationDeadline is a jittered 70–90 % of the certificate's lifetime.
func rotationDeadline(notBefore, notAfter time.Time) time.Time {
	total := notAfter.Sub(notBefore)
	frac := 0.7 + 0.2*rand.Float64()
	return notBefore.Add(time.Duration(float64(total) * frac))
}

var errRevoked = errors.New("the hub revoked this host's identity")

func certExpiry(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	mt := metav1.NewTime(*t)
	return &mt
}
