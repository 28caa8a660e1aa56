package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
)

// Options configure the gateway.
type Options struct {
	// Addr to listen on, e.g. ":8443" or "127.0.0.1:0".
	Addr string
	// HubNamespace holds the hub CA Secret and the enrollment tokens.
	HubNamespace string
	// CASecretName is the Secret that keeps the hub CA.
	CASecretName string
	// DNSNames and IPs go into the serving certificate; agents dial one of them.
	DNSNames []string
	IPs      []net.IP
	// ClientCertValidity is the lifetime of host certificates.
	ClientCertValidity time.Duration
	// RotationOverlap is how long a host's previous certificate still
	// opens sessions after a rotation, unless the new one is used first
	// (default 10 min): enough for an agent whose answer was lost with its
	// session to come back and ask again, too short for a stolen key to
	// outlive the rotation.
	RotationOverlap time.Duration
	// MaxConcurrentHandshakes admits at most this many session handshakes at
	// once (default 1024); the rest wait up to HelloTimeout/2 for a place,
	// then are told to come back later (503, Retry-After). A place is held
	// from the upgrade until the agent's Hello, mostly waiting on the
	// agent, for a few KiB: a small limit turns agents away while the cores
	// idle, and each comes back with a new TLS handshake.
	MaxConcurrentHandshakes int
	// MaxConcurrentTLSHandshakes bounds the TLS handshakes in progress
	// (default 64 per core); more connections wait, newest served first,
	// up to TLSHandshakeWait for a place and are then closed (the agent
	// retries). A handshake is mostly the hub's CPU: unbounded, a fleet
	// dialling at once shares the cores between all of its handshakes and
	// none completes in time (see handshakeListener).
	MaxConcurrentTLSHandshakes int
	// MaxTLSHandshakesPerSource is how many of those one source address
	// (an IPv6 /64) may hold (default a quarter of them): one address, an
	// attacker's or one site's NAT, never holds every place.
	MaxTLSHandshakesPerSource int
	// TLSHandshakeWait is how long a connection waits for its ClientHello,
	// and then for a TLS handshake place (default 10 s: agents give a dial
	// 15 s).
	TLSHandshakeWait time.Duration
	// MaxPendingConnections bounds the connections between accept and a
	// finished TLS handshake (default 16,384), MaxPendingConnectionsPerSource
	// those from one address (default 1,024: a large site behind one NAT
	// reconnecting at once); more are closed at once.
	MaxPendingConnections          int
	MaxPendingConnectionsPerSource int
	// MaxConnections bounds the established connections (default 65,536),
	// MaxConnectionsPerSource those from one address (default 32,768: a
	// fleet of 10,000 behind one NAT fits).
	MaxConnections          int
	MaxConnectionsPerSource int
	// MaxConcurrentEnrollments admits at most this many enrollments at
	// once (default 16); more are told to come back shortly (503). Each
	// costs several API requests: without a bound, a fleet powering up at
	// once queues more at the hub's client than it can send before the
	// agents give up, and every retry adds to the queue.
	MaxConcurrentEnrollments int
	// EnrollWait is how long an enrollment beyond MaxConcurrentEnrollments
	// waits for a place before it is told to come back (default 15 s,
	// within the agent's 30-s request timeout; negative: not at all).
	EnrollWait time.Duration
	// MaxConcurrentStatusWrites bounds the hub's EdgeHost status writes in
	// flight (default 16); the rest wait their turn. After a restart or an
	// outage thousands of sessions record themselves at once: unbounded,
	// they overflow the HTTP/2 connection's streams so the client opens
	// more connections (a TLS handshake on both sides each), and the API
	// server spends the cores the agents' handshakes need.
	MaxConcurrentStatusWrites int
	// WaveStatusDelay is how long a write that only says a host is well
	// (AgentConnected on a new session, a lastSeenTime refresh) waits for
	// a wave of connections to pass (default 1 min; negative: not at
	// all). Each such write costs the API server more CPU than the hub's
	// share of a session's TLS handshake (docs/PERFORMANCE.md, "Cold start
	// and reconnect storm"); written after the wave, the cores serve the
	// handshakes first, and the hosts are recorded as fast as the client's
	// rate limit lets them anyway.
	WaveStatusDelay time.Duration
	// EnrollRate and EnrollBurst limit enrollments across all callers.
	EnrollRate  rate.Limit
	EnrollBurst int
	// LastSeenInterval is how often lastSeenTime is refreshed for a
	// connected agent: the only write an idle agent costs.
	LastSeenInterval time.Duration
	// KeepAlive is the session ping interval agents use. The hub does not
	// ping (a timer per session would cost more than the agents' pings):
	// a session from which nothing, not even a ping, arrived for
	// AgentIdleTimeout is closed.
	KeepAlive time.Duration
	// AgentIdleTimeout closes a session that sent nothing for this long
	// (default 4 × KeepAlive: agents ping every KeepAlive).
	AgentIdleTimeout time.Duration
	// DisconnectGrace is how long a host whose session ended still reads
	// as connected (default 30 s; negative: recorded at once). An agent
	// that comes back within it (a restart, a dropped connection, a hub
	// replica restarting) costs no API write at all, where recording
	// every drop would cost two per agent: after a network blip, one per
	// agent of the whole fleet, twice.
	DisconnectGrace time.Duration
	// ReturnGrace is how long after this replica starts the hosts it last
	// recorded as connected (it stopped without recording their ends) have
	// to come back before they are recorded disconnected (default 1 min:
	// agents that held a session in the last 5 minutes retry every 10 s at
	// most).
	ReturnGrace time.Duration
	// PushWorkers compute and send desired states for all sessions
	// (default 32); a push to a stuck agent holds one for at most the
	// write timeout.
	PushWorkers int
	// HelloTimeout bounds the handshake after the upgrade.
	HelloTimeout time.Duration
	// ReplicaName names this replica in conditions and logs.
	ReplicaName string
	// AdvertiseURL is the URL agents use to reach the gateway; it is
	// published, with the CA pin, in the ConfigMap fleet-hub-info so that
	// `kubectl fleet token create` can print a complete agent command.
	AdvertiseURL string
	// Logger is the gateway's log (default: the manager's "gateway").
	Logger logr.Logger
	// LinkThresholds decide when a link-health report is written at once
	// (its LinkDegraded verdict changed) rather than with lastSeenTime;
	// they must be the EdgeHost reconciler's.
	LinkThresholds linkhealth.Thresholds
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if o.CASecretName == "" {
		o.CASecretName = "fleet-hub-ca"
	}
	if o.ClientCertValidity == 0 {
		o.ClientCertValidity = 90 * 24 * time.Hour
	}
	if o.RotationOverlap <= 0 {
		o.RotationOverlap = 10 * time.Minute
	}
	if o.MaxConcurrentHandshakes == 0 {
		o.MaxConcurrentHandshakes = 1024
	}
	if o.MaxConcurrentTLSHandshakes <= 0 {
		o.MaxConcurrentTLSHandshakes = 64 * runtime.GOMAXPROCS(0)
	}
	if o.MaxTLSHandshakesPerSource <= 0 {
		o.MaxTLSHandshakesPerSource = max(o.MaxConcurrentTLSHandshakes/4, 1)
	}
	if o.MaxPendingConnections <= 0 {
		o.MaxPendingConnections = 16384
	}
	if o.MaxPendingConnectionsPerSource <= 0 {
		o.MaxPendingConnectionsPerSource = min(1024, o.MaxPendingConnections)
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = 65536
	}
	if o.MaxConnectionsPerSource <= 0 {
		o.MaxConnectionsPerSource = max(o.MaxConnections/2, 1)
	}
	if o.TLSHandshakeWait <= 0 {
		o.TLSHandshakeWait = 10 * time.Second
	}
	if o.MaxConcurrentStatusWrites <= 0 {
		o.MaxConcurrentStatusWrites = 16
	}
	if o.WaveStatusDelay == 0 {
		o.WaveStatusDelay = time.Minute
	}
	if o.MaxConcurrentEnrollments == 0 {
		o.MaxConcurrentEnrollments = 16
	}
	if o.EnrollWait == 0 {
		o.EnrollWait = 15 * time.Second
	}
	if o.EnrollRate == 0 {
		o.EnrollRate, o.EnrollBurst = 20, 50
	}
	if o.LastSeenInterval == 0 {
		o.LastSeenInterval = 5 * time.Minute
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = transport.KeepAliveInterval
	}
	if o.AgentIdleTimeout == 0 {
		o.AgentIdleTimeout = 4 * o.KeepAlive
	}
	if o.DisconnectGrace == 0 {
		o.DisconnectGrace = 30 * time.Second
	}
	if o.ReturnGrace == 0 {
		o.ReturnGrace = time.Minute
	}
	if o.PushWorkers == 0 {
		o.PushWorkers = 32
	}
	if o.HelloTimeout == 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrl.Log.WithName("gateway")
	}
	if o.ReplicaName == "" {
		o.ReplicaName = "fleet-hub"
	}
}

// Server is the gateway. Add it to a manager with Setup.
type Server struct {
	opts Options
	// client reads EdgeHosts from the informer cache and writes through
	// the API server.
	client client.Client
	// apiReader reads what is not cached: tokens and bootstrap Secrets.
	apiReader client.Reader
	log       logr.Logger

	ca        *pki.CA
	enrollLim *rate.Limiter
	// setups counts, per host, sessions between authentication and Hello.
	setupMu sync.Mutex
	setups  map[string]int
	// tokenLocks serialise enrollments per token (striped) on this replica.
	tokenLocks [64]sync.Mutex
	admission  chan struct{}
	enrolling  chan struct{}
	// statusWrites holds a place per status write in flight.
	statusWrites chan struct{}
	// waves tells whether connections queue for a TLS handshake place.
	waves *waves
	// pushes holds sessions whose desired state may have changed; the
	// push workers drain it. One session is never pushed by two workers
	// at once.
	pushes workqueue.TypedInterface[*session]

	mu       sync.Mutex
	sessions map[string]*session // by "namespace/name"
	// pendingDisconnect holds, under mu, a timer per host whose session
	// ended less than DisconnectGrace ago ("namespace/name").
	pendingDisconnect map[string]*time.Timer
	// connMu serialises AgentConnected/lastSeenTime writes per host, so a
	// reconnect's "connected" and the old session's "disconnected" cannot
	// land in the wrong order.
	connMu sync.Map // "namespace/name" → *sync.Mutex
	// wroteDisconnect holds the hosts this process last recorded as
	// disconnected ("namespace/name" → true).
	wroteDisconnect sync.Map
	listener        net.Listener
	ready           chan struct{}
	// ctx lives as long as Start: sessions run under it.
	ctx context.Context
}

// Setup creates the gateway and adds it to mgr as a runnable on every
// replica. It watches EdgeHosts through mgr's cache.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*Server, error) {
	opts.Defaults()
	if opts.HubNamespace == "" {
		return nil, errors.New("gateway: HubNamespace is required")
	}
	s := &Server{
		opts:              opts,
		client:            mgr.GetClient(),
		apiReader:         mgr.GetAPIReader(),
		log:               opts.Logger,
		enrollLim:         rate.NewLimiter(opts.EnrollRate, opts.EnrollBurst),
		admission:         make(chan struct{}, opts.MaxConcurrentHandshakes),
		enrolling:         make(chan struct{}, opts.MaxConcurrentEnrollments),
		statusWrites:      make(chan struct{}, opts.MaxConcurrentStatusWrites),
		waves:             newWaves(),
		sessions:          map[string]*session{},
		setups:            map[string]int{},
		pendingDisconnect: map[string]*time.Timer{},
		ready:             make(chan struct{}),
		pushes:            workqueue.NewTyped[*session](),
	}
	inf, err := mgr.GetCache().GetInformer(ctx, &infrav1.EdgeHost{})
	if err != nil {
		return nil, fmt.Errorf("gateway: EdgeHost informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		// Add too: a host deleted and re-created under the same name must
		// cut off sessions of the old one.
		AddFunc: func(obj any) {
			s.hostChanged(obj)
			s.membersChanged(nil, obj)
		},
		UpdateFunc: func(old, obj any) {
			s.hostChanged(obj)
			s.membersChanged(old, obj)
		},
		DeleteFunc: func(obj any) {
			s.hostDeleted(obj)
			s.membersChanged(obj, nil)
		},
	}); err != nil {
		return nil, fmt.Errorf("gateway: EdgeHost event handler: %w", err)
	}
	// A cluster's endpoint is part of its hosts' desired state (Reach).
	clusters, err := mgr.GetCache().GetInformer(ctx, &clusterv1.Cluster{})
	if err != nil {
		return nil, fmt.Errorf("gateway: Cluster informer: %w", err)
	}
	if _, err := clusters.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.clusterChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { s.clusterChanged(old, obj) },
	}); err != nil {
		return nil, fmt.Errorf("gateway: Cluster event handler: %w", err)
	}
	if err := mgr.Add(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NeedLeaderElection is false: every replica serves agents.
func (s *Server) NeedLeaderElection() bool { return false }

// Ready is closed once the gateway listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the gateway listens on, once Ready.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// CA is the hub CA, once Ready.
func (s *Server) CA() *pki.CA { return s.ca }

// Start serves until ctx ends, then closes every session.
func (s *Server) Start(ctx context.Context) error {
	ca, err := EnsureCA(ctx, s.client, s.apiReader, s.opts.HubNamespace, s.opts.CASecretName)
	if err != nil {
		return err
	}
	s.ca = ca
	s.ctx = ctx
	if err := s.publishInfo(ctx); err != nil {
		return err
	}
	serving, err := ca.ServingCertificate(s.opts.DNSNames, s.opts.IPs, 365*24*time.Hour)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tlsCfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serving},
		// /v1/ca and /v1/enroll are for hosts without a certificate yet;
		// /v1/connect insists on one (checked before the upgrade).
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
		NextProtos: []string{"http/1.1"},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.PathCA, s.serveCA)
	mux.HandleFunc("POST "+wire.PathEnroll, s.serveEnroll)
	mux.HandleFunc("GET "+wire.PathConnect, s.serveConnect)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          nil,
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listening on %s: %w", s.opts.Addr, err)
	}
	s.listener = ln
	close(s.ready)
	s.log.Info("Serving agents", "addr", ln.Addr().String(), "caPin", ca.Pin())

	var workers sync.WaitGroup
	for range s.opts.PushWorkers {
		workers.Go(s.pushWorker)
	}
	defer func() {
		s.pushes.ShutDown()
		workers.Wait()
	}()

	sweep := time.AfterFunc(s.opts.ReturnGrace, func() { s.sweepUnreturned(ctx) })
	defer sweep.Stop()

	errc := make(chan error, 1)
	// The TLS handshake timeout is net/http's read-header timeout, which
	// it used to bound.
	tlsLn := newHandshakeListener(ln, tlsCfg, admissionLimits{
		Handshakes: s.opts.MaxConcurrentTLSHandshakes, HandshakesPerSource: s.opts.MaxTLSHandshakesPerSource,
		Pending: s.opts.MaxPendingConnections, PendingPerSource: s.opts.MaxPendingConnectionsPerSource,
		Connections: s.opts.MaxConnections, ConnectionsPerSource: s.opts.MaxConnectionsPerSource,
		Wait: s.opts.TLSHandshakeWait, Timeout: srv.ReadHeaderTimeout,
	})
	go followWaves(ctx, tlsLn.places, s.waves, freeOSMemory)
	go func() { errc <- srv.Serve(tlsLn) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("gateway: serving: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	s.mu.Lock()
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		ss.close()
	}
	return nil
}

// sweepUnreturned records as disconnected the hosts that still read as
// connected to this replica but whose agents did not come back since it
// started: a stopping replica records no session ends (its agents come back
// within seconds), so an agent that died meanwhile would read connected
// until the EdgeHost reconciler's ContactLost.
func (s *Server) sweepUnreturned(ctx context.Context) {
	hosts := &infrav1.EdgeHostList{}
	if err := s.client.List(ctx, hosts); err != nil {
		s.log.Error(err, "Listing EdgeHosts to find agents that did not come back")
		return
	}
	for i := range hosts.Items {
		h := &hosts.Items[i]
		c := meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentConnectedCondition)
		if c == nil || c.Status != metav1.ConditionTrue || h.Status.HubReplica != s.opts.ReplicaName ||
			s.sessionFor(h.Namespace, h.Name) != nil || ctx.Err() != nil {
			continue
		}
		gone := &session{srv: s, id: pki.Identity{Namespace: h.Namespace, Name: h.Name, UID: string(h.UID)}, done: make(chan struct{})}
		close(gone.done)
		s.markDisconnected(ctx, gone)
	}
}

// pushWorker pushes desired states until the queue shuts down.
func (s *Server) pushWorker() {
	for {
		ss, shutdown := s.pushes.Get()
		if shutdown {
			return
		}
		retry := ss.push()
		s.pushes.Done(ss)
		if retry {
			// An error reading the cache or the bootstrap Secret must not
			// leave the agent without its desired state until the next
			// host event.
			time.AfterFunc(2*time.Second, func() {
				select {
				case <-ss.done:
				default:
					s.pushes.Add(ss)
				}
			})
		}
	}
}

func (s *Server) serveCA(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(s.ca.CertPEM)
}
