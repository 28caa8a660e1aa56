package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/version"
	fleetcrd "github.com/edgefleet/fleet/manifests/crd"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// Options configure the embedded hub.
type Options struct {
	// DataDir keeps etcd's data, the kubeconfig and the log.
	DataDir string
	// Reset starts from an empty fleet.
	Reset bool
	// BinDir holds kube-apiserver and etcd.
	BinDir string
	// GatewayAddr is where agents connect (host:port).
	GatewayAddr string
	// AdvertiseURL is the gateway URL agents are told to use; default
	// https://<GatewayAddr>, with 127.0.0.1 for an unspecified host.
	AdvertiseURL string
	// GatewayIPs and GatewayDNSNames are further names agents reach the
	// gateway by (a LAN address, a NAT router's), put in its serving
	// certificate beside 127.0.0.1, localhost and AdvertiseURL's host.
	GatewayIPs      []net.IP
	GatewayDNSNames []string
	// ProxyAddr is where the edge-reach proxy listens (host:port), which
	// carries Cluster API's connections to edge clusters through their
	// agents; "0" turns edge reach off.
	ProxyAddr string
	// ProxyAdvertiseURL is the proxy as Cluster API and kubeconfigs from
	// `kubectl fleet kubeconfig` reach it; default http://<ProxyAddr>.
	ProxyAdvertiseURL string
	// HubNamespace holds the hub CA and the enrollment tokens.
	HubNamespace string
	// MetricsAddr serves the hub's Prometheus metrics (plain HTTP, local
	// use); "0" turns them off.
	MetricsAddr string
	// Progress receives one line per step, for people.
	Progress io.Writer
	// Logger receives the components' logs.
	Logger logr.Logger
}

func (o *Options) defaults() error {
	if o.DataDir == "" {
		o.DataDir = ".fleet"
	}
	if o.GatewayAddr == "" {
		o.GatewayAddr = "127.0.0.1:7443"
	}
	if o.HubNamespace == "" {
		o.HubNamespace = "fleet-system"
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.ProxyAddr == "" {
		o.ProxyAddr = "127.0.0.1:7444"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	host, port, err := net.SplitHostPort(o.GatewayAddr)
	if err != nil {
		return fmt.Errorf("gateway address %q: %w", o.GatewayAddr, err)
	}
	if o.AdvertiseURL == "" {
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		o.AdvertiseURL = "https://" + net.JoinHostPort(host, port)
	}
	return nil
}

// Run serves until ctx ends, then stops everything it started: the
// managers first, then the API server and etcd. The fleet stays in
// DataDir for the next Run.
func Run(ctx context.Context, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	say := func(format string, args ...any) { fmt.Fprintf(o.Progress, format+"\n", args...) }
	scheme := clusterapi.NewScheme()
	api, err := startAPIServer(o, scheme, say)
	if err != nil {
		return err
	}
	defer func() {
		say("stopping kube-apiserver and etcd…")
		if err := api.Stop(); err != nil {
			say("%v", err)
		}
	}()

	cfg := rest.CopyConfig(api.Config)
	cfg.UserAgent = "fleet-hub-dev/" + version.Version
	// One process runs every controller against a local server: lift
	// client-go's default 5 QPS, which would only slow the demo down.
	cfg.QPS, cfg.Burst = 200, 400
	if err := ensureNamespace(ctx, cfg, o.HubNamespace); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := clusterapi.EnableFeatureGates(); err != nil {
		return err
	}
	webhooks, err := clusterapi.NewWebhooks("127.0.0.1")
	if err != nil {
		return err
	}
	managers, gw, err := newManagers(ctx, cfg, scheme, webhooks, o)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	// A kept fleet holds the last run's configurations, pointed at ports
	// no one serves now: gone until this run's servers answer.
	if err := webhooks.Uninstall(ctx, c, providers...); err != nil {
		return err
	}
	// Cluster API's admission webhooks, installed once their servers
	// answer, as a real management cluster runs them.
	installWebhooks := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := webhooks.WaitServing(ctx, providers...); err != nil {
			return err
		}
		return webhooks.Install(ctx, c, providers...)
	}
	say("starting the Cluster API core, kubeadm bootstrap and control-plane reconcilers (v1.14.2) and the fleet hub…")
	ready := func() {
		say("fleet hub %s is ready", version.Version)
		say("  kubeconfig: %s", api.Kubeconfig)
		say("  gateway:    %s (CA pin %s)", o.AdvertiseURL, gw.CA().Pin())
		if o.ProxyAddr != "0" {
			say("  edge reach: %s (Cluster API and kubectl fleet kubeconfig reach edge clusters through it)", o.ProxyAddr)
		}
		say("  try:        KUBECONFIG=%s kubectl fleet token create", api.Kubeconfig)
	}
	return runManagers(ctx, cancel, managers, installWebhooks, gw.Ready(), ready, say)
}

// startAPIServer starts etcd and kube-apiserver with Cluster API's and
// fleet's CRDs installed.
func startAPIServer(o Options, scheme *runtime.Scheme, say func(string, ...any)) (*localkube.Server, error) {
	crds, err := clusterapi.CRDs()
	if err != nil {
		return nil, err
	}
	fleetCRDs, err := fleetcrd.CRDs()
	if err != nil {
		return nil, err
	}
	say("starting etcd and kube-apiserver (data in %s)…", o.DataDir)
	api, err := localkube.Start(localkube.Options{
		Dir: o.DataDir, BinDir: o.BinDir, Reset: o.Reset, ContextName: "fleet-dev",
		CRDs: append(crds, fleetCRDs...), Scheme: scheme,
	})
	if err != nil {
		return nil, err
	}
	say("installed %d Cluster API and %d fleet CRDs", len(crds), len(fleetCRDs))
	return api, nil
}

// providers are the Cluster API providers fleet-hub dev runs.
var providers = []clusterapi.Provider{clusterapi.ProviderCore, clusterapi.ProviderKubeadmBootstrap, clusterapi.ProviderKubeadmControlPlane}

// newManagers makes Cluster API core's, CABPK's, KCP's and the fleet
// hub's managers, as their own binaries would run them, with their
// admission webhooks.
func newManagers(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, webhooks *clusterapi.Webhooks, o Options) ([]ctrl.Manager, *gateway.Server, error) {
	capiOpts := clusterapi.Options{
		Webhooks:                webhooks,
		Name:                    "capi-controller-manager",
		GracefulShutdownTimeout: 10 * time.Second,
		// The demo restarts its workload API server; reconnect soon.
		ConnectionRetryInterval: 5 * time.Second,
		// Core and CABPK each have a ClusterCache controller of the same
		// name; their own binaries run in separate processes.
		SkipNameValidation: true,
		Logger:             o.Logger.WithName("capi"),
	}
	capiMgr, err := clusterapi.NewCoreManager(ctx, cfg, scheme, capiOpts)
	if err != nil {
		return nil, nil, err
	}
	capiOpts.Name, capiOpts.Logger = "capi-kubeadm-bootstrap-controller-manager", o.Logger.WithName("cabpk")
	cabpkMgr, err := clusterapi.NewKubeadmBootstrapManager(ctx, cfg, scheme, capiOpts)
	if err != nil {
		return nil, nil, err
	}
	capiOpts.Name, capiOpts.Logger = "capi-kubeadm-control-plane-controller-manager", o.Logger.WithName("kcp")
	kcpMgr, err := clusterapi.NewKubeadmControlPlaneManager(ctx, cfg, scheme, capiOpts)
	if err != nil {
		return nil, nil, err
	}
	shutdown := 10 * time.Second
	hubMgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		GracefulShutdownTimeout: &shutdown,
		Logger:                  o.Logger.WithName("fleet-hub"),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating fleet hub manager: %w", err)
	}
	h, err := hub.Setup(ctx, hubMgr, hub.Options{
		Reconcilers: hubreconcilers.Options{Concurrency: 10,
			// Twice the gateway's default 5-minute lastSeenTime refresh, plus a minute.
			ContactTimeout: 11 * time.Minute},
		Gateway: &gateway.Options{
			Addr:           o.GatewayAddr,
			HubNamespace:   o.HubNamespace,
			DNSNames:       gatewayDNSNames(o.AdvertiseURL, o.GatewayDNSNames),
			IPs:            gatewayIPs(o.AdvertiseURL, o.GatewayIPs),
			ReplicaName:    "fleet-hub-dev",
			AdvertiseURL:   o.AdvertiseURL,
			LinkThresholds: linkhealth.DefaultThresholds(),
		},
		Reach: &reach.SetupOptions{Options: reach.Options{Addr: o.ProxyAddr}, AdvertiseURL: o.ProxyAdvertiseURL},
		// The in-place hooks on loopback, registered with the Cluster API
		// reconcilers of this process.
		InPlace: &inplace.Options{Addr: "127.0.0.1:0", Namespace: o.HubNamespace, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Register: true},
		// Hosts' logs and facts, through this API server's aggregation
		// layer, which reaches the hub on loopback.
		HostAccess: &hostaccess.Options{Addr: "127.0.0.1:0", Namespace: o.HubNamespace, Register: true,
			Service: "fleet-hub-host-access", ExternalName: "localhost"},
	})
	if err != nil {
		return nil, nil, err
	}
	return []ctrl.Manager{capiMgr, cabpkMgr, kcpMgr, hubMgr}, h.Gateway, nil
}

// runManagers runs managers until ctx ends or one fails, runs startup once
// they run, and calls ready once startup is done and the gateway is ready;
// then it stops them all (cancel) and waits.
func runManagers(ctx context.Context, cancel context.CancelFunc, managers []ctrl.Manager, startup func(context.Context) error,
	gwReady <-chan struct{}, ready func(), say func(string, ...any)) error {
	errs := make(chan error, len(managers))
	for _, m := range managers {
		go func() { errs <- m.Start(ctx) }()
	}
	started := make(chan error, 1)
	go func() { started <- startup(ctx) }()
	stopped := 0
	var runErr error
	managerStopped := func(err error, while string) {
		stopped++
		if err != nil && ctx.Err() == nil {
			runErr = fmt.Errorf("a manager stopped%s: %w", while, err)
		}
	}
	select {
	case err := <-started:
		if err != nil {
			if ctx.Err() == nil {
				runErr = fmt.Errorf("starting: %w", err)
			}
			break
		}
		select {
		case <-gwReady:
			ready()
		case err := <-errs:
			managerStopped(err, " while starting")
		case <-ctx.Done():
		}
	case err := <-errs:
		managerStopped(err, " while starting")
	case <-ctx.Done():
	}
	// Wait for a manager to fail or for the end.
	if runErr == nil && stopped == 0 {
		select {
		case err := <-errs:
			managerStopped(err, "")
		case <-ctx.Done():
		}
	}
	say("shutting down…")
	cancel()
	for ; stopped < len(managers); stopped++ {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

// gatewayIPs are the addresses in the gateway's certificate: loopback,
// the advertised URL's if it is an address, and the extra ones.
func gatewayIPs(advertise string, extra []net.IP) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if ip := net.ParseIP(advertisedHost(advertise)); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	for _, ip := range extra {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	return ips
}

// gatewayDNSNames are the names in the gateway's certificate: localhost,
// the advertised URL's if it is a name, and the extra ones.
func gatewayDNSNames(advertise string, extra []string) []string {
	names := []string{"localhost"}
	if h := advertisedHost(advertise); h != "" && net.ParseIP(h) == nil {
		names = append(names, h)
	}
	for _, n := range extra {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

func advertisedHost(advertise string) string {
	host := strings.TrimPrefix(advertise, "https://")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host
}

func ensureNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// LogFile opens DataDir/hub.log for the components' logs.
func LogFile(dataDir string) (*os.File, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dataDir, "hub.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
}
