package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/lazylog"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

type options struct {
	metricsAddr          string
	probeAddr            string
	leaderElect          bool
	leaderElectionID     string
	leaderElectionNS     string
	watchNamespace       string
	watchFilter          string
	concurrency          int
	syncPeriod           time.Duration
	secureMetrics        bool
	showVersion          bool
	enableHTTP2          bool
	zap                  zap.Options
	leaseDuration        time.Duration
	renewDeadline        time.Duration
	retryPeriod          time.Duration
	gracefulShutdownTime time.Duration

	gatewayAddr        string
	hubNamespace       string
	gatewayDNSNames    string
	gatewayIPs         string
	advertiseURL       string
	clientCertValidity time.Duration
	maxHandshakes      int
	maxTLSHandshakes   int
	maxTLSPerSource    int
	maxPending         int
	maxPendingSource   int
	maxConns           int
	maxConnsSource     int
	rotationOverlap    time.Duration
	maxEnrollments     int
	lastSeenInterval   time.Duration
	disconnectGrace    time.Duration
	waveStatusDelay    time.Duration
	disableGateway     bool
	pprofAddr          string
	enrollRate         float64
	enrollBurst        int
	linkRetransmits    float64
	linkRTT            time.Duration
	proxyAddr          string
	proxyAdvertiseURL  string
	proxyMaxTunnels    int
	proxyPeerDomain    string
	kubeAPIQPS         float64
	kubeAPIBurst       int
	gcPercent          int
}

func (o *options) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; \"0\" turns it off.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS with Kubernetes authentication and authorization.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":9440", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints (profiling; off when empty). Never expose it.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Run the reconcilers on one replica at a time, chosen by a Lease.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "fleet-hub-leader.edgefleet.io", "Name of the leader-election Lease.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the Lease; defaults to the namespace the hub runs in.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before taking over.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before giving up.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often leader-election actions are retried.")
	fs.StringVar(&o.watchNamespace, "namespace", "", "Only watch this namespace; empty watches all (as clusterctl installs it).")
	fs.StringVar(&o.watchFilter, "watch-filter", "", "Only reconcile Cluster API objects labelled cluster.x-k8s.io/watch-filter=<value>.")
	fs.IntVar(&o.concurrency, "concurrency", 10, "Workers per reconciler.")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "How often every object is reconciled even without changes.")
	fs.DurationVar(&o.gracefulShutdownTime, "graceful-shutdown-timeout", 30*time.Second, "How long to wait for reconcilers to finish on shutdown.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Serve metrics over HTTP/2 (off by default: CVE-2023-44487, CVE-2023-39325).")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&o.gatewayAddr, "gateway-bind-address", ":7443", "Address the agent gateway (TLS: /v1/ca, /v1/enroll, /v1/connect) listens on.")
	fs.StringVar(&o.hubNamespace, "hub-namespace", envOr("POD_NAMESPACE", "fleet-system"), "Namespace of the hub CA Secret and the enrollment tokens.")
	fs.StringVar(&o.gatewayDNSNames, "gateway-dns-names", "", "Comma-separated DNS names agents use to reach the gateway (put in its serving certificate).")
	fs.StringVar(&o.gatewayIPs, "gateway-ips", "", "Comma-separated IP addresses agents use to reach the gateway.")
	fs.StringVar(&o.advertiseURL, "gateway-advertise-url", "", "URL agents use to reach the gateway (published for `kubectl fleet token create`).")
	fs.DurationVar(&o.clientCertValidity, "client-cert-validity", 90*24*time.Hour, "Lifetime of host client certificates; agents renew at 70-90 %.")
	fs.IntVar(&o.maxHandshakes, "max-concurrent-handshakes", 1024, "Session handshakes admitted at once (from the upgrade to the agent's Hello); more wait up to 5 s for a place, then are told to retry (503).")
	fs.IntVar(&o.maxTLSHandshakes, "max-concurrent-tls-handshakes", 0, "TLS handshakes on the gateway at once (0: 64 per core); more connections wait up to 10 s for a place, the newest served first, then are closed. Bounded, a fleet dialling at once after an outage is served one handshake after another instead of all of them timing out together.")
	fs.IntVar(&o.maxTLSPerSource, "max-tls-handshakes-per-source", 0, "TLS handshakes one source address (an IPv6 /64) may hold at once (0: a quarter of --max-concurrent-tls-handshakes). A connection takes a place only once its ClientHello has arrived.")
	fs.IntVar(&o.maxPending, "max-pending-connections", 0, "Connections between accept and a finished TLS handshake (0: 16384); more are closed at once.")
	fs.IntVar(&o.maxPendingSource, "max-pending-connections-per-source", 0, "Of those, from one source address (0: 1024, a large site behind one NAT reconnecting at once).")
	fs.IntVar(&o.maxConns, "max-connections", 0, "Established gateway connections (0: 65536).")
	fs.IntVar(&o.maxConnsSource, "max-connections-per-source", 0, "Established gateway connections from one source address, e.g. one site's NAT (0: half of --max-connections).")
	fs.DurationVar(&o.rotationOverlap, "rotation-overlap", 10*time.Minute, "How long a host's previous client certificate still opens sessions after a rotation, unless the new one is used first.")
	fs.IntVar(&o.maxEnrollments, "max-concurrent-enrollments", 16, "Enrollments in progress at once; more are told to retry shortly (503). Each costs several API requests (see --kube-api-qps).")
	fs.DurationVar(&o.lastSeenInterval, "last-seen-interval", 5*time.Minute, "How often a connected host's lastSeenTime is refreshed (its only idle API write).")
	fs.DurationVar(&o.disconnectGrace, "disconnect-grace", 30*time.Second, "How long a host whose session ended still reads as connected: an agent back within it (a restart, a dropped connection, a hub restart) costs no API write. 0 records every disconnection at once.")
	fs.DurationVar(&o.waveStatusDelay, "wave-status-delay", time.Minute, "How long a write that only records a host as well (AgentConnected on a new session, a lastSeenTime refresh) waits while a wave of connections queues for TLS handshakes, so that the hub's and the API server's cores serve the handshakes first. 0 writes at once. A lost host is always recorded at once.")
	fs.BoolVar(&o.disableGateway, "disable-gateway", false, "Run only the reconcilers, without the agent gateway.")
	fs.Float64Var(&o.enrollRate, "enroll-rate", 20, "Enrollments admitted per second across all agents (each signs a certificate and creates an EdgeHost).")
	fs.IntVar(&o.enrollBurst, "enroll-burst", 50, "Enrollments admitted at once above --enroll-rate.")
	def := linkhealth.DefaultThresholds()
	fs.Float64Var(&o.linkRetransmits, "link-degraded-retransmits", def.RetransmitsToHubPerMinute, "TCP retransmissions per minute from an agent to the hub at which its EdgeHost is LinkDegraded.")
	fs.DurationVar(&o.linkRTT, "link-degraded-rtt", def.RTT, "Round-trip time from an agent to the hub at which its EdgeHost is LinkDegraded.")
	fs.StringVar(&o.proxyAddr, "proxy-bind-address", ":7444", "Address of the edge-reach CONNECT proxy that carries Cluster API's connections to edge clusters through their agents; \"0\" turns edge reach off (and removes the proxy-url it wrote into kubeconfig Secrets).")
	fs.StringVar(&o.proxyAdvertiseURL, "proxy-advertise-url", "", "URL Cluster API's controllers reach the edge-reach proxy at, http://host:port (written as proxy-url into each fleet cluster's kubeconfig Secret); required unless --proxy-bind-address names a host.")
	fs.StringVar(&o.proxyPeerDomain, "proxy-peer-domain", "", "DNS domain under which each hub replica's proxy is <pod name>.<domain> (a headless Service); a CONNECT for a cluster whose agents hold sessions on another replica is forwarded there. Empty: one replica, no forwarding.")
	fs.IntVar(&o.proxyMaxTunnels, "proxy-max-tunnels", 4096, "Edge-reach tunnels this replica carries at once (each agent carries at most 32).")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 100, "Requests per second the hub sends the API server at most (client-side limit). Its idle load is one lastSeenTime refresh (a read and a write) per connected host per --last-seen-interval: keep it above twice the hosts divided by that interval in seconds.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 200, "Requests the hub may send at once above --kube-api-qps.")
	fs.IntVar(&o.gcPercent, "gc-percent", 25, "Go garbage-collector target: the heap may grow this many percent above live data before a collection. The hub's live heap is mostly its idle sessions and caches, so a low value keeps memory per agent low for little CPU (docs/PERFORMANCE.md); the GOGC environment variable, when set, wins.")
	o.zap.BindFlags(fs)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "dev" {
		if err := dev(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "fleet-hub dev: %v\n", err)
			os.Exit(1)
		}
		return
	}
	var o options
	fs := newFlagSet(&o)
	_ = fs.Parse(os.Args[1:])
	if o.showVersion {
		fmt.Println(version.Version)
		return
	}
	ctrl.SetLogger(lazylog.New(zap.New(zap.UseFlagOptions(&o.zap))))
	klog.SetLogger(ctrl.Log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-hub: loading kubeconfig: %v\n", err)
		os.Exit(1)
	}
	if o.maxTLSPerSource < 0 || o.maxPending < 0 || o.maxPendingSource < 0 || o.maxConns < 0 || o.maxConnsSource < 0 {
		fmt.Fprintln(os.Stderr, "fleet-hub: the --max-*-connections and --max-tls-handshakes-per-source limits must not be negative")
		os.Exit(2)
	}
	if o.maxHandshakes < 0 || o.maxTLSHandshakes < 0 || o.maxEnrollments < 0 {
		fmt.Fprintf(os.Stderr, "fleet-hub: --max-concurrent-handshakes, --max-concurrent-tls-handshakes and --max-concurrent-enrollments must not be negative (got %d, %d and %d)\n", o.maxHandshakes, o.maxTLSHandshakes, o.maxEnrollments)
		os.Exit(2)
	}
	if o.disconnectGrace < 0 || o.waveStatusDelay < 0 {
		fmt.Fprintf(os.Stderr, "fleet-hub: --disconnect-grace and --wave-status-delay must not be negative (got %s and %s)\n", o.disconnectGrace, o.waveStatusDelay)
		os.Exit(2)
	}
	if o.gcPercent < 1 {
		fmt.Fprintf(os.Stderr, "fleet-hub: --gc-percent must be at least 1 (got %d); set GOGC=off to turn the collector off\n", o.gcPercent)
		os.Exit(2)
	}
	if o.kubeAPIQPS <= 0 || o.kubeAPIBurst <= 0 {
		fmt.Fprintf(os.Stderr, "fleet-hub: --kube-api-qps and --kube-api-burst must be positive (got %v and %d)\n", o.kubeAPIQPS, o.kubeAPIBurst)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = float32(o.kubeAPIQPS), o.kubeAPIBurst
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.gcPercent)
	}
	if err := run(ctrl.SetupSignalHandler(), cfg, o); err != nil {
		fmt.Fprintf(os.Stderr, "fleet-hub: %v\n", err)
		os.Exit(1)
	}
}

// newFlagSet binds every flag, including controller-runtime's --kubeconfig,
// to o.
func newFlagSet(o *options) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet-hub", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "fleet-hub runs fleet's Cluster API infrastructure provider for edge machines.\n\n"+
			"It uses the kubeconfig of --kubeconfig, $KUBECONFIG, the in-cluster service account, or ~/.kube/config, in that order.\n\n"+
			"  fleet-hub [flags]       run against a management cluster\n"+
			"  fleet-hub dev --help    run a local management cluster in this process (try-out and demo)\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// controller-runtime registers --kubeconfig on the global flag set.
	flag.CommandLine.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	o.bind(fs)
	return fs
}

// cacheOptions: what the manager's informers hold. They hold every
// EdgeHost of the fleet; their managedFields, which the hub never reads,
// are kept out (memory per idle agent, and every deep copy). A patch or an
// update sent without them leaves the API server's as they are.
func (o options) cacheOptions() cache.Options {
	opts := cache.Options{SyncPeriod: &o.syncPeriod, DefaultTransform: cache.TransformStripManagedFields()}
	if o.watchNamespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{o.watchNamespace: {}}
	}
	return opts
}

// run serves until ctx ends.
func run(ctx context.Context, cfg *rest.Config, o options) error {
	log := ctrl.Log.WithName("setup")
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "fleet-hub/" + version.Version

	cacheOpts := o.cacheOptions()
	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics}
	if o.secureMetrics {
		metricsOpts.FilterProvider = authnzFilter
	}
	if !o.enableHTTP2 {
		metricsOpts.TLSOpts = append(metricsOpts.TLSOpts, disableHTTP2)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  hubreconcilers.NewScheme(),
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.retryPeriod,
		Cache:                   cacheOpts,
		GracefulShutdownTimeout: &o.gracefulShutdownTime,
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	thresholds := linkhealth.Thresholds{RetransmitsToHubPerMinute: o.linkRetransmits, RTT: o.linkRTT}
	if err := hubreconcilers.Setup(ctx, mgr, hubreconcilers.Options{
		Concurrency:      o.concurrency,
		WatchFilterValue: o.watchFilter,
		// Twice the refresh interval (what the gateway itself takes for
		// fresh), plus slack for a write that waited its turn.
		ContactTimeout: 2*o.lastSeenInterval + time.Minute,
	}); err != nil {
		return err
	}
	if !o.disableGateway {
		var ips []net.IP
		for _, s := range splitList(o.gatewayIPs) {
			ip := net.ParseIP(s)
			if ip == nil {
				return fmt.Errorf("--gateway-ips: %q is not an IP address", s)
			}
			ips = append(ips, ip)
		}
		hostname, _ := os.Hostname()
		gw, err := gateway.Setup(ctx, mgr, gateway.Options{
			Addr:                           o.gatewayAddr,
			HubNamespace:                   o.hubNamespace,
			DNSNames:                       splitList(o.gatewayDNSNames),
			IPs:                            ips,
			ClientCertValidity:             o.clientCertValidity,
			MaxConcurrentHandshakes:        o.maxHandshakes,
			MaxConcurrentEnrollments:       o.maxEnrollments,
			MaxConcurrentTLSHandshakes:     o.maxTLSHandshakes,
			MaxTLSHandshakesPerSource:      o.maxTLSPerSource,
			MaxPendingConnections:          o.maxPending,
			MaxPendingConnectionsPerSource: o.maxPendingSource,
			MaxConnections:                 o.maxConns,
			MaxConnectionsPerSource:        o.maxConnsSource,
			RotationOverlap:                o.rotationOverlap,
			LastSeenInterval:               o.lastSeenInterval,
			DisconnectGrace:                zeroMeansNone(o.disconnectGrace),
			WaveStatusDelay:                zeroMeansNone(o.waveStatusDelay),
			ReplicaName:                    hostname,
			AdvertiseURL:                   o.advertiseURL,
			LinkThresholds:                 thresholds,
			EnrollRate:                     rate.Limit(o.enrollRate),
			EnrollBurst:                    o.enrollBurst,
		})
		if err != nil {
			return err
		}
		if o.proxyAddr == "0" {
			if err := reach.SetupDisabled(mgr, controller.Options{MaxConcurrentReconciles: max(o.concurrency, 1)}); err != nil {
				return err
			}
		} else {
			ropts := reach.Options{Addr: o.proxyAddr, MaxTunnels: o.proxyMaxTunnels, ReplicaName: hostname}
			if o.proxyPeerDomain != "" {
				_, port, err := net.SplitHostPort(o.proxyAddr)
				if err != nil {
					return fmt.Errorf("--proxy-bind-address %q: %w", o.proxyAddr, err)
				}
				ropts.PeerAddr = func(replica string) string {
					return net.JoinHostPort(replica+"."+o.proxyPeerDomain, port)
				}
			}
			if _, err := reach.Setup(ctx, mgr, gw, reach.SetupOptions{
				Options:      ropts,
				AdvertiseURL: o.proxyAdvertiseURL,
				Controller:   controller.Options{MaxConcurrentReconciles: max(o.concurrency, 1)},
			}); err != nil {
				return err
			}
		}
		if err := mgr.AddReadyzCheck("gateway", func(*http.Request) error {
			select {
			case <-gw.Ready():
				return nil
			default:
				return fmt.Errorf("agent gateway is not listening yet")
			}
		}); err != nil {
			return fmt.Errorf("adding gateway readiness check: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return fmt.Errorf("informer caches not synced")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	log.Info("Starting fleet-hub", "version", version.Version)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// zeroMeansNone maps a duration flag, where 0 means "at once", to
// gateway.Options, where 0 means the default.
func zeroMeansNone(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
