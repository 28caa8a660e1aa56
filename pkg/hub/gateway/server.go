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
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/eventnote"
	"github.com/edgefleet/fleet/pkg/hub/hoststatus"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	"github.com/edgefleet/fleet/pkg/hub/sessions"
	"github.com/edgefleet/fleet/pkg/hub/staging"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
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
	// none completes in time (see admission.Listener).
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
	// MinAgentProtocol is the oldest protocol version served (0:
	// wire.MinProtocol); agents that speak only older ones are refused.
	MinAgentProtocol int
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
	// ReplicaProxy is where other replicas reach this one's edge-reach
	// proxy (host:port, the pod IP), published in the status of the hosts
	// whose sessions it holds; "" for none.
	ReplicaProxy string
	// AdvertiseURL is the URL agents use to reach the gateway; it is
	// published, with the CA pin, in the ConfigMap fleet-hub-info so that
	// `kubectl fleet token create` can print a complete agent command.
	AdvertiseURL string
	// Logger is the gateway's log (default: the manager's "gateway").
	Logger logr.Logger
	// SessionMux is the hub's end of the yamux protocol: "hubmux" (the
	// default: one goroutine an idle session) or "yamux" (hashicorp/yamux,
	// the fallback should hubmux's assumptions about crypto/tls break; see
	// pkg/transport's doc).
	SessionMux string
	// LinkThresholds decide when a link-health report is written at once
	// (its LinkDegraded verdict changed) rather than with lastSeenTime;
	// they must be the EdgeHost reconciler's.
	LinkThresholds linkhealth.Thresholds
	// Releases bound the agent release transfers of this replica.
	Releases delivery.Options
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

// Server is the gateway: the HTTP front that authenticates agents and
// hands each request to the room that serves it. Add it to a manager with
// Setup.
type Server struct {
	opts Options
	// client reads EdgeHosts from the informer cache and writes through
	// the API server; apiReader reads what is not cached.
	client    client.Client
	apiReader client.Reader
	log       logr.Logger

	ca        *pki.CA
	authority *identity.Authority
	enroller  *enrollment.Enroller
	sessions  *sessions.Registry
	status    *hoststatus.Writer
	resolver  *reach.Resolver
	dialer    *reach.Dialer
	waves     *admission.Waves
	// handshakes are the places sessions hold from the upgrade to the
	// agent's Hello.
	handshakes *admission.Places
	// setups counts, per host, sessions between authentication and Hello.
	setupMu sync.Mutex
	setups  map[string]int

	listener net.Listener
	ready    chan struct{}
}

// Setup creates the gateway and adds it to mgr as a runnable on every
// replica. It watches EdgeHosts and Clusters through mgr's cache.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) (*Server, error) {
	opts.Defaults()
	if opts.HubNamespace == "" {
		return nil, errors.New("gateway: HubNamespace is required")
	}
	if err := hubmux.CheckKind(opts.SessionMux); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s := newServer(mgr.GetClient(), mgr.GetAPIReader(), eventnote.Recorder(mgr.GetEventRecorder("fleet-hub-gateway")), opts)
	inf, err := mgr.GetCache().GetInformer(ctx, &infrav1.EdgeHost{})
	if err != nil {
		return nil, fmt.Errorf("gateway: EdgeHost informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		// Add too: a host deleted and re-created under the same name must
		// cut off sessions of the old one.
		AddFunc: func(obj any) {
			s.sessions.HostChanged(obj)
			s.resolver.MembersChanged(nil, obj)
		},
		UpdateFunc: func(old, obj any) {
			s.sessions.HostChanged(obj)
			s.resolver.MembersChanged(old, obj)
		},
		DeleteFunc: func(obj any) {
			s.sessions.HostDeleted(obj)
			s.resolver.MembersChanged(obj, nil)
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
		AddFunc:    func(obj any) { s.resolver.ClusterChanged(nil, obj) },
		UpdateFunc: func(old, obj any) { s.resolver.ClusterChanged(old, obj) },
	}); err != nil {
		return nil, fmt.Errorf("gateway: Cluster event handler: %w", err)
	}
	// The releases of a host's namespace are part of its desired state
	// (Stage); a change is rare and tells every host there.
	releases, err := mgr.GetCache().GetInformer(ctx, &infrav1.EdgeKubernetesRelease{})
	if err != nil {
		return nil, fmt.Errorf("gateway: EdgeKubernetesRelease informer: %w", err)
	}
	kickNamespace := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			s.sessions.KickNamespace(o.GetNamespace())
		} else if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			if o, ok := tomb.Obj.(client.Object); ok {
				s.sessions.KickNamespace(o.GetNamespace())
			}
		}
	}
	if _, err := releases.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    kickNamespace,
		UpdateFunc: func(_, obj any) { kickNamespace(obj) },
		DeleteFunc: kickNamespace,
	}); err != nil {
		return nil, fmt.Errorf("gateway: EdgeKubernetesRelease event handler: %w", err)
	}
	// So are its agent releases and the roll-outs under way (AgentRelease).
	for _, obj := range []client.Object{&infrav1.EdgeAgentRelease{}, &infrav1.EdgeAgentRollout{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("gateway: %T informer: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    kickNamespace,
			UpdateFunc: func(_, obj any) { kickNamespace(obj) },
			DeleteFunc: kickNamespace,
		}); err != nil {
			return nil, fmt.Errorf("gateway: %T event handler: %w", obj, err)
		}
	}
	if err := mgr.Add(s); err != nil {
		return nil, err
	}
	return s, nil
}

// newServer wires the gateway's rooms together.
func newServer(c client.Client, apiReader client.Reader, recorder events.EventRecorder, opts Options) *Server {
	s := &Server{opts: opts, client: c, apiReader: apiReader, log: opts.Logger,
		waves: admission.NewWaves(), handshakes: admission.NewPlaces(opts.MaxConcurrentHandshakes),
		setups: map[string]int{}, ready: make(chan struct{})}
	s.resolver = reach.NewResolver(c, func(namespace, name string, seen time.Time) { s.sessions.Kick(namespace, name, seen) })
	s.sessions = sessions.New(c, apiReader, opts.Logger, s.resolver, sessions.Options{
		PushWorkers: opts.PushWorkers, LastSeenInterval: opts.LastSeenInterval, AgentIdleTimeout: opts.AgentIdleTimeout,
		Mux: opts.SessionMux, MinAgentProtocol: opts.MinAgentProtocol})
	s.status = hoststatus.New(c, apiReader, recorder, opts.Logger, s.sessions,
		admission.NewPlaces(opts.MaxConcurrentStatusWrites), s.waves, hoststatus.Options{
			ReplicaName: opts.ReplicaName, ReplicaProxy: opts.ReplicaProxy, LastSeenInterval: opts.LastSeenInterval, DisconnectGrace: opts.DisconnectGrace,
			WaveStatusDelay: opts.WaveStatusDelay, LinkThresholds: opts.LinkThresholds})
	s.sessions.SetStatusWriter(s.status)
	s.sessions.SetStageResolver(&staging.Resolver{Client: c})
	orders := &delivery.Orders{Client: c}
	s.sessions.SetReleaseDelivery(releaseDelivery{orders: orders, server: delivery.NewServer(orders, opts.Logger, opts.Releases)})
	s.dialer = reach.NewDialer(c, s.resolver, s.sessions)
	return s
}

// NeedLeaderElection is false: every replica serves agents.
func (s *Server) NeedLeaderElection() bool { return false }

// Ready is closed once the gateway listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the gateway listens on, once Ready.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// CA is the hub CA, once Ready.
func (s *Server) CA() *pki.CA { return s.ca }

// Session is the session this replica holds with the host's agent, or nil.
func (s *Server) Session(namespace, name string) *sessions.Session {
	return s.sessions.Lookup(namespace, name)
}

// DialCluster opens a tunnel to target through a connected agent of the
// cluster (see reach.Dialer).
func (s *Server) DialCluster(ctx context.Context, namespace, cluster, target string) (net.Conn, string, error) {
	return s.dialer.DialCluster(ctx, namespace, cluster, target)
}

// Start serves until ctx ends, then closes every session.
func (s *Server) Start(ctx context.Context) error {
	if err := s.loadIdentity(ctx); err != nil {
		return err
	}
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.PathCA, s.serveCA)
	mux.Handle("POST "+wire.PathEnroll, s.enroller)
	mux.HandleFunc("GET "+wire.PathConnect, s.serveConnect)
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("gateway: listening on %s: %w", s.opts.Addr, err)
	}
	s.listener = ln
	close(s.ready)
	s.log.Info("Serving agents", "addr", ln.Addr().String(), "caPin", s.ca.Pin())

	sessionsDone := s.sessions.Start(ctx)
	defer func() { <-sessionsDone }()
	sweep := time.AfterFunc(s.opts.ReturnGrace, func() { s.status.SweepUnreturned(ctx) })
	defer sweep.Stop()

	// The TLS handshake timeout is net/http's read-header timeout, which
	// it used to bound.
	tlsLn := admission.NewListener(ln, tlsCfg, admission.Limits{
		Handshakes: s.opts.MaxConcurrentTLSHandshakes, HandshakesPerSource: s.opts.MaxTLSHandshakesPerSource,
		Pending: s.opts.MaxPendingConnections, PendingPerSource: s.opts.MaxPendingConnectionsPerSource,
		Connections: s.opts.MaxConnections, ConnectionsPerSource: s.opts.MaxConnectionsPerSource,
		Wait: s.opts.TLSHandshakeWait, Timeout: srv.ReadHeaderTimeout,
	})
	go tlsLn.FollowWaves(ctx, s.waves)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tlsLn) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("gateway: serving: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// loadIdentity loads (or makes) the hub CA, publishes its pin and sets up
// what signs with it.
func (s *Server) loadIdentity(ctx context.Context) error {
	ca, err := identity.EnsureCA(ctx, s.client, s.apiReader, s.opts.HubNamespace, s.opts.CASecretName)
	if err != nil {
		return err
	}
	s.ca = ca
	s.authority = &identity.Authority{Client: s.client, APIReader: s.apiReader, CA: ca, Log: s.log,
		ClientCertValidity: s.opts.ClientCertValidity, RotationOverlap: s.opts.RotationOverlap}
	s.sessions.SetAuthority(s.authority)
	s.enroller = enrollment.NewEnroller(s.client, s.apiReader, ca, s.log, enrollment.EnrollerOptions{
		HubNamespace: s.opts.HubNamespace, ClientCertValidity: s.opts.ClientCertValidity,
		MaxConcurrent: s.opts.MaxConcurrentEnrollments, Wait: s.opts.EnrollWait,
		Rate: s.opts.EnrollRate, Burst: s.opts.EnrollBurst})
	return s.publishInfo(ctx)
}

// tlsConfig serves the gateway's certificate from the hub CA and verifies
// client certificates from it.
func (s *Server) tlsConfig() (*tls.Config, error) {
	serving, err := s.ca.ServingCertificate(s.opts.DNSNames, s.opts.IPs, 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.ca.Cert)
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serving},
		// /v1/ca and /v1/enroll are for hosts without a certificate yet;
		// /v1/connect insists on one (checked before the upgrade).
		ClientAuth: tls.VerifyClientCertIfGiven,
		ClientCAs:  pool,
		NextProtos: []string{"http/1.1"},
	}, nil
}

func (s *Server) serveCA(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/x-pem-file")
	_, _ = w.Write(s.ca.CertPEM)
}
