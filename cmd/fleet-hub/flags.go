package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// options is everything the fleet-hub command's flags set, one group per
// part of the hub. The groups bind straight into the options of the
// package they configure wherever the flag means the same as the field.
type options struct {
	manager     managerOptions
	reconcilers hubreconcilers.Options
	gateway     gateway.Options
	// disableGateway runs the reconcilers alone (no gateway, no edge reach).
	disableGateway bool
	reach          reachOptions
	hooks          hooksOptions
	hostAccess     hostAccessOptions
	zap            zap.Options
	showVersion    bool
}

// managerOptions configure controller-runtime's manager and the process
// around it, as Cluster API's managers name them.
type managerOptions struct {
	metricsAddr             string
	secureMetrics           bool
	enableHTTP2             bool
	probeAddr               string
	pprofAddr               string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	watchNamespace          string
	syncPeriod              time.Duration
	gracefulShutdownTimeout time.Duration
	kubeAPIQPS              float64
	kubeAPIBurst            int
	gcPercent               int
}

// reachOptions configure the edge-reach proxy.
type reachOptions struct {
	reach.SetupOptions
	// peerAddress is where the other replicas reach this one's proxy;
	// empty: no CONNECT is forwarded between replicas.
	peerAddress string
}

// hooksOptions configure the server of Cluster API's in-place update hooks.
type hooksOptions struct {
	addr     string
	dnsNames []string
	service  string
}

// hostAccessOptions configure the host-access API.
type hostAccessOptions struct {
	addr    string
	service string
}

// addFlags binds every flag of the default command to o.
func (o *options) addFlags(fs *pflag.FlagSet) {
	addManagerFlags(fs, &o.manager)
	addReconcilerFlags(fs, &o.reconcilers)
	addGatewayFlags(fs, &o.gateway)
	fs.BoolVar(&o.disableGateway, "disable-gateway", false, "Run only the reconcilers, without the agent gateway and edge reach.")
	addReachFlags(fs, &o.reach)
	addHooksFlags(fs, &o.hooks)
	addHostAccessFlags(fs, &o.hostAccess)
	addZapFlags(fs, &o.zap)
	// controller-runtime registers --kubeconfig on the standard flag set.
	fs.AddGoFlagSet(flag.CommandLine)
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
}

func addManagerFlags(fs *pflag.FlagSet, o *managerOptions) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; \"0\" turns it off.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS, only to callers the API server authenticates and authorizes.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false, "Serve metrics over HTTP/2 (off: CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":9440", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of Go's /debug/pprof endpoints for profiling; off when empty. Never expose it.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Run the reconcilers on one replica at a time, chosen by a Lease.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "fleet-hub-leader.edgefleet.io", "Name of the leader-election Lease.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the Lease; defaults to the namespace the hub runs in.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a non-leader waits before taking over.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before giving up.")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second, "How often leader-election actions are retried.")
	fs.StringVar(&o.watchNamespace, "namespace", "", "Only watch this namespace; empty watches all (as clusterctl installs it).")
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute, "How often every object is reconciled even without changes.")
	fs.DurationVar(&o.gracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "How long to wait for reconcilers to finish on shutdown.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 100, "Requests per second the hub sends the API server at most; keep it above the idle load of two requests per host per --last-seen-interval.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 200, "Requests the hub may send at once above --kube-api-qps.")
	fs.IntVar(&o.gcPercent, "gc-percent", 25, "Go garbage-collector target (GOGC): low, because the live heap is mostly idle sessions and caches; the GOGC environment variable wins.")
}

func addReconcilerFlags(fs *pflag.FlagSet, o *hubreconcilers.Options) {
	fs.StringVar(&o.WatchFilterValue, "watch-filter", "", "Only reconcile Cluster API objects labelled cluster.x-k8s.io/watch-filter=<value>.")
	fs.IntVar(&o.Concurrency, "concurrency", 10, "Workers per reconciler.")
}

// addGatewayFlags binds the agent gateway's flags. For --disconnect-grace
// and --wave-status-delay 0 means "at once", where gateway.Options takes 0
// for its default: run maps them with zeroMeansNone.
func addGatewayFlags(fs *pflag.FlagSet, o *gateway.Options) {
	fs.StringVar(&o.Addr, "gateway-bind-address", ":7443", "Address the agent gateway (TLS: /v1/ca, /v1/enroll, /v1/connect) listens on.")
	def := linkhealth.DefaultThresholds()
	fs.Float64Var(&o.LinkThresholds.RetransmitsToHubPerMinute, "link-degraded-retransmits", def.RetransmitsToHubPerMinute, "TCP retransmissions per minute from an agent to the hub at which its EdgeHost is LinkDegraded.")
	fs.DurationVar(&o.LinkThresholds.RTT, "link-degraded-rtt", def.RTT, "Round-trip time from an agent to the hub at which its EdgeHost is LinkDegraded.")
	fs.IntVar(&o.MinAgentProtocol, "min-agent-protocol", wire.MinProtocol, fmt.Sprintf("The oldest hub-agent protocol version served (%d–%d); agents that speak only older ones are refused, their EdgeHosts AgentVersionUnsupported.", wire.MinProtocol, wire.MaxProtocol))
	fs.StringVar(&o.SessionMux, "session-mux", hubmux.KindHubmux, "The hub's end of the agents' yamux sessions: "+strings.Join(hubmux.Kinds(), " or ")+" (hashicorp/yamux, a fallback that costs more memory per agent).")
	fs.StringVar(&o.HubNamespace, "hub-namespace", envOr("POD_NAMESPACE", "fleet-system"), "Namespace of the hub CA Secret and the enrollment tokens.")
	fs.StringSliceVar(&o.DNSNames, "gateway-dns-names", nil, "Comma-separated DNS names agents use to reach the gateway (put in its serving certificate).")
	fs.IPSliceVar(&o.IPs, "gateway-ips", nil, "Comma-separated IP addresses agents use to reach the gateway (put in its serving certificate).")
	fs.StringVar(&o.AdvertiseURL, "gateway-advertise-url", "", "URL agents use to reach the gateway, published for kubectl fleet token create.")
	fs.DurationVar(&o.ClientCertValidity, "client-cert-validity", 90*24*time.Hour, "Lifetime of host client certificates; agents renew at 70-90 % of it.")
	fs.DurationVar(&o.RotationOverlap, "rotation-overlap", 10*time.Minute, "How long a host's previous client certificate still opens sessions after a rotation, unless the new one is used first.")
	fs.IntVar(&o.MaxConcurrentHandshakes, "max-concurrent-handshakes", 1024, "Session handshakes (upgrade to the agent's Hello) admitted at once; more wait briefly, then are told to retry (503).")
	fs.IntVar(&o.MaxConcurrentTLSHandshakes, "max-concurrent-tls-handshakes", 0, "TLS handshakes at once (0: 64 per core); more wait, newest first, so a fleet dialling at once is served instead of timing out together.")
	fs.IntVar(&o.MaxTLSHandshakesPerSource, "max-tls-handshakes-per-source", 0, "TLS handshakes one source address (an IPv6 /64) may hold at once, counted from its ClientHello (0: a quarter of --max-concurrent-tls-handshakes).")
	fs.IntVar(&o.MaxPendingConnections, "max-pending-connections", 0, "Connections between accept and a finished TLS handshake (0: 16384); more are closed at once.")
	fs.IntVar(&o.MaxPendingConnectionsPerSource, "max-pending-connections-per-source", 0, "Of those, from one source address (0: 1024, a large site behind one NAT reconnecting at once).")
	fs.IntVar(&o.MaxConnections, "max-connections", 0, "Established gateway connections (0: 65536).")
	fs.IntVar(&o.MaxConnectionsPerSource, "max-connections-per-source", 0, "Established gateway connections from one source address, e.g. one site's NAT (0: half of --max-connections).")
	fs.IntVar(&o.MaxConcurrentEnrollments, "max-concurrent-enrollments", 16, "Enrollments in progress at once, each several API requests; more are told to retry shortly (503).")
	fs.Float64Var((*float64)(&o.EnrollRate), "enroll-rate", 20, "Enrollments admitted per second across all agents (each signs a certificate and creates an EdgeHost).")
	fs.IntVar(&o.EnrollBurst, "enroll-burst", 50, "Enrollments admitted at once above --enroll-rate.")
	fs.DurationVar(&o.LastSeenInterval, "last-seen-interval", 5*time.Minute, "How often a connected host's lastSeenTime is refreshed (its only idle API write).")
	fs.DurationVar(&o.DisconnectGrace, "disconnect-grace", 30*time.Second, "How long a host whose session ended still reads as connected, so an agent back within it costs no API write; 0 records every disconnection at once.")
	fs.DurationVar(&o.WaveStatusDelay, "wave-status-delay", time.Minute, "How long a write that only records a host as well waits while connections queue for TLS handshakes, which come first; 0 writes at once.")
	fs.StringVar(&o.Releases.CacheDir, "release-cache-dir", "", "Where the hub keeps the agent release binaries and the Kubernetes archives it carries, fetched from their EdgeAgentReleases' and EdgeKubernetesReleases' urls, by sha256 (default <temp dir>/fleet-hub-releases; an emptyDir does).")
	fs.IntVar(&o.Releases.MaxTransfers, "release-max-transfers", delivery.DefaultMaxTransfers, "Transfers (agent releases, Kubernetes archives) this replica carries at once, one per host at most; more wait for a place.")
	fs.Int64Var(&o.Releases.BytesPerSecond, "release-bandwidth", delivery.DefaultBytesPerSecond, "Bytes per second this replica sends to agents in transfers (agent releases, Kubernetes archives), all together; 0 is unbounded.")
}

func addReachFlags(fs *pflag.FlagSet, o *reachOptions) {
	fs.StringVar(&o.Addr, "proxy-bind-address", ":7444", "Address of the edge-reach CONNECT proxy that carries Cluster API's connections to edge clusters through their agents; \"0\" turns edge reach off.")
	fs.StringVar(&o.AdvertiseURL, "proxy-advertise-url", "", "URL (http://host:port) at which Cluster API reaches the edge-reach proxy, written as proxy-url into kubeconfig Secrets; required unless --proxy-bind-address names a host.")
	fs.StringVar(&o.peerAddress, "proxy-peer-address", "", "Address (host:port) at which the other hub replicas reach this replica's edge-reach proxy, recorded in the status of the hosts whose agents it serves, so that a CONNECT landing on another replica is forwarded here; in a Deployment, the pod IP from the downward API ($(POD_IP):7444). Empty: CONNECTs are not forwarded between replicas (run one).")
	fs.IntVar(&o.MaxTunnels, "proxy-max-tunnels", 4096, "Edge-reach tunnels this replica carries at once.")
}

func addHooksFlags(fs *pflag.FlagSet, o *hooksOptions) {
	fs.StringVar(&o.addr, "runtime-extension-bind-address", ":9444", "Address of the Runtime SDK extension serving Cluster API's in-place update hooks (TLS from the CA in Secret fleet-runtime-extension-ca, which Cluster API injects into the ExtensionConfig); \"0\" turns it off, and Cluster API then replaces Machines on every change.")
	fs.StringVar(&o.service, "runtime-extension-service", "fleet-hub-runtime-extension", "Service (port 443, in the hub's namespace) through which Cluster API reaches the extension; the hub keeps the ExtensionConfig \"fleet\" pointing at it. Empty: the hub registers nothing (register it yourself).")
	fs.StringSliceVar(&o.dnsNames, "runtime-extension-dns-names", nil, "DNS names Cluster API dials the extension by, put in its serving certificate (default: <--runtime-extension-service>.<hub namespace>.svc).")
}

func addHostAccessFlags(fs *pflag.FlagSet, o *hostAccessOptions) {
	fs.StringVar(&o.addr, "host-access-bind-address", ":9445", "Address of the host-access API (kubectl fleet host logs|facts), which the Kubernetes API server's aggregation layer proxies to (TLS from the CA in Secret fleet-host-access-ca); \"0\" turns it off.")
	fs.StringVar(&o.service, "host-access-service", "fleet-hub-host-access", "Service (in the hub's namespace) through which the aggregation layer reaches the host-access API; the hub keeps the APIService "+hostaccess.APIServiceName+" pointing at it. Empty: the hub registers nothing (register it yourself).")
}

// addZapFlags adds the --zap-* flags of controller-runtime's logger.
func addZapFlags(fs *pflag.FlagSet, o *zap.Options) {
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	o.BindFlags(zapFlags)
	fs.AddGoFlagSet(zapFlags)
}

// validate rejects values the hub cannot run with.
func (o *options) validate() error {
	g, m := o.gateway, o.manager
	var errs []error
	if g.MaxTLSHandshakesPerSource < 0 || g.MaxPendingConnections < 0 || g.MaxPendingConnectionsPerSource < 0 || g.MaxConnections < 0 || g.MaxConnectionsPerSource < 0 {
		errs = append(errs, errors.New("the --max-*-connections and --max-tls-handshakes-per-source limits must not be negative"))
	}
	if g.MaxConcurrentHandshakes < 0 || g.MaxConcurrentTLSHandshakes < 0 || g.MaxConcurrentEnrollments < 0 {
		errs = append(errs, fmt.Errorf("--max-concurrent-handshakes, --max-concurrent-tls-handshakes and --max-concurrent-enrollments must not be negative (got %d, %d and %d)", g.MaxConcurrentHandshakes, g.MaxConcurrentTLSHandshakes, g.MaxConcurrentEnrollments))
	}
	if g.DisconnectGrace < 0 || g.WaveStatusDelay < 0 {
		errs = append(errs, fmt.Errorf("--disconnect-grace and --wave-status-delay must not be negative (got %s and %s)", g.DisconnectGrace, g.WaveStatusDelay))
	}
	if g.Releases.MaxTransfers < 1 || g.Releases.BytesPerSecond < 0 {
		errs = append(errs, fmt.Errorf("--release-max-transfers must be at least 1 and --release-bandwidth not negative (got %d and %d)", g.Releases.MaxTransfers, g.Releases.BytesPerSecond))
	}
	if g.MinAgentProtocol < wire.MinProtocol || g.MinAgentProtocol > wire.MaxProtocol {
		errs = append(errs, fmt.Errorf("--min-agent-protocol must be a version this hub speaks, %d–%d (got %d)", wire.MinProtocol, wire.MaxProtocol, g.MinAgentProtocol))
	}
	if err := hubmux.CheckKind(g.SessionMux); err != nil {
		errs = append(errs, fmt.Errorf("--session-mux: %w", err))
	}
	if m.gcPercent < 1 {
		errs = append(errs, fmt.Errorf("--gc-percent must be at least 1 (got %d); set GOGC=off to turn the collector off", m.gcPercent))
	}
	if err := checkPeerAddress(o.reach.peerAddress); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-peer-address: %w", err))
	}
	if m.kubeAPIQPS <= 0 || m.kubeAPIBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive (got %v and %d)", m.kubeAPIQPS, m.kubeAPIBurst))
	}
	return errors.Join(errs...)
}

// checkPeerAddress accepts "" or a host:port other replicas can dial.
func checkPeerAddress(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q names no host another replica could dial (set the pod IP)", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q: bad port: %w", addr, err)
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
