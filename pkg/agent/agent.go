package agent

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent/hostaccess"
	"github.com/edgefleet/fleet/pkg/agent/reach"
	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/agent/status"
	"github.com/edgefleet/fleet/pkg/agent/streams"
	"github.com/edgefleet/fleet/pkg/agent/tunnel"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// MaxTunnels bounds the tunnels one agent carries at once.
const MaxTunnels = tunnel.MaxOpen

// Agent is one fleet-agent.
type Agent struct {
	cfg   Config
	store state.Store
	prov  Provisioner
	log   logr.Logger
	// upgrader moves the host's Kubernetes in place; nil when it cannot.
	upgrader Upgrader
	// staging fetches the versions the hub orders staged.
	staging staging

	// Sources: the hub session, and link health when enabled.
	session *session.Source
	updates chan session.Update
	links   chan *infrav1.LinkHealth

	// desired carries the newest desired state from the loop to the
	// worker; only the latest matters (level-triggered).
	desired chan *wire.DesiredState

	status *status.Manager

	mu      sync.Mutex
	applied state.Applied
	// saveMu orders the writes of applied, so an older snapshot is never
	// written last; unsaved is why the last write failed (a full or
	// read-only state directory), nil once one worked: housekeeping
	// writes it again, and the status reports it.
	saveMu  sync.Mutex
	unsaved atomic.Pointer[string]

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

	// Liveness, for the watchdog: when the loop last found itself and its
	// workers alive (UnixNano), and how the worker is doing.
	lastHealthy  atomic.Pointer[time.Time]
	workerBusy   busySince
	housekeeping time.Duration
	stallLimits  stallLimits
	// stuck: the last check found a worker stuck (only the loop uses it).
	stuck bool

	// Link health: the probe (nil without one), why there is none, and
	// the last window's report.
	linkProbe       LinkCounter
	linkUnavailable string
	linkEnabled     bool
	link            atomic.Pointer[infrav1.LinkHealth]
	refreshMu       sync.Mutex
	// clockSkew is how far this host's clock is ahead of the hub's, as
	// reported: zero when within wire.MinClockSkew.
	clockSkew atomic.Int64

	// Edge reach: how this host's cluster endpoint is reached at the site,
	// and the tunnels the hub opens to it.
	reach   *reach.Owner
	tunnels *tunnel.Server
	// Host access: the hub's requests for the agent's logs and facts.
	hostAccess *hostaccess.Server
	started    time.Time
	// trial is set when this run is the trial of a new release;
	// releases reports the agent's releases.
	trial *trialGate
	// rel runs the releases the hub orders; nil when the agent does not.
	rel *releaseRoom
	// archives brings the Kubernetes archives the hub carries.
	archives *HubArchives
	// renewals asks the worker to renew the certificates if they are due.
	renewals chan struct{}
}

// New makes an agent. cfg must be Completed and Validated.
func New(cfg Config, prov Provisioner, log logr.Logger) *Agent {
	// The one setting load tests and the demo leave unset.
	if cfg.CertificatesCheckInterval <= 0 {
		cfg.CertificatesCheckInterval = 24 * time.Hour
	}
	a := &Agent{
		cfg:          cfg,
		store:        state.Store{Dir: cfg.StateDir, Log: log.WithName("state")},
		prov:         prov,
		log:          log,
		updates:      make(chan session.Update),
		links:        make(chan *infrav1.LinkHealth),
		desired:      make(chan *wire.DesiredState, 1),
		status:       status.New(),
		housekeeping: time.Second,
		stallLimits:  defaultStallLimits,
		staging:      newStaging(),
		archives:     newHubArchives(),
		renewals:     make(chan struct{}, 1),
	}
	a.reach = reach.NewOwner(cfg.RootDir, log)
	a.tunnels = &tunnel.Server{Targets: a.reach.DialTargets, Log: log}
	a.started = time.Now()
	a.hostAccess = &hostaccess.Server{Facts: a.factsReport, Log: log, Transcripts: map[wire.LogSource]string{
		wire.LogBootstrap: filepath.Join(cfg.StateDir, BootstrapTranscript),
		wire.LogReset:     filepath.Join(cfg.StateDir, ResetTranscript),
	}}
	mux := &streams.Mux{Handlers: a.hostAccess.Handlers(), Log: log}
	mux.Handlers[wire.TypeTunnel] = a.tunnels.Handler
	mux.Handlers[wire.TypeReleaseData] = a.receiveTransfer
	opts := sessionOptions(cfg)
	opts.Generation = a.helloGeneration
	opts.Streams = mux.Accept
	opts.Capabilities = a.hostAccess.Capabilities()
	opts.Announce = a.announce
	opts.ClockSkew = a.learnClockSkew
	opts.TransferRefused = a.archives.refused
	a.session = session.New(opts, a.store, log)
	return a
}

// sessionOptions is what the session source takes from cfg.
func sessionOptions(cfg Config) session.Options {
	return session.Options{Hub: cfg.Hub, Token: cfg.Token, TokenFile: cfg.TokenFile, CACertHash: cfg.CACertHash, RootDir: cfg.RootDir,
		MaxBackoff: cfg.MaxBackoff, KeepAlive: cfg.KeepAlive, Dial: cfg.dialContext, Version: cfg.Version}
}

func (a *Agent) announce(text string) {
	if a.OnStatus != nil {
		a.OnStatus(text)
	}
}

// The agent's counters are what a metrics endpoint would export; the
// gateway tests and the load driver read them too.

// Enrollments counts enrollments this process made.
func (a *Agent) Enrollments() int64 { return a.session.Enrollments() }

// Sessions counts sessions this process opened.
func (a *Agent) Sessions() int64 { return a.session.Sessions() }

// Connected reports whether a session is open now.
func (a *Agent) Connected() bool { return a.session.Connected() }

// Rotations counts certificate rotations.
func (a *Agent) Rotations() int64 { return a.session.Rotations() }

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
	if err := a.restore(); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	start := func(run func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); run(ctx) }()
	}
	start(a.worker)
	if a.staging.stager != nil && a.upgrader != nil {
		start(a.stagingWorker)
	}
	var restart error
	if a.rel != nil {
		start(func(ctx context.Context) {
			a.releaseWorker(ctx, func(err error) { restart = err; cancel() })
		})
	}
	start(a.status.Run)
	start(func(ctx context.Context) { a.session.Run(ctx, a.updates) })
	if a.linkEnabled && a.cfg.LinkInterval > 0 {
		start(a.linkSource)
	}
	a.syncLoop(ctx)
	cancel()
	wg.Wait()
	if a.trial != nil && a.trial.expired {
		return ErrTrialExpired
	}
	return restart
}

// restore loads what the agent had applied and received before a restart.
func (a *Agent) restore() error {
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
	return nil
}

// helloGeneration is the generation the session reports in Hello for the
// identity whose EdgeHost had the uid idUID at enrollment. Generations count
// per EdgeHost: under a new identity the old number means nothing (and would
// make every new desired state look old). The same identity keeps its count,
// also after its EdgeHost was restored under a new uid (the desired state
// names that incarnation, see followIncarnation). The workload, if any, is
// kept either way.
func (a *Agent) helloGeneration(idUID types.UID) (int64, error) {
	cur := a.Applied()
	known := cur.IdentityUID
	if known == "" {
		known = cur.HostUID
	}
	switch {
	case known != idUID:
		if err := a.update(func(ap *state.Applied) { ap.IdentityUID, ap.HostUID, ap.Generation = idUID, idUID, 0 }); err != nil {
			return 0, err
		}
	case cur.IdentityUID == "":
		if err := a.update(func(ap *state.Applied) { ap.IdentityUID = idUID }); err != nil {
			return 0, err
		}
	}
	return a.Applied().Generation, nil
}
