package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/clusterapi"
	"github.com/edgefleet/fleet/internal/localkube"
	"github.com/edgefleet/fleet/internal/version"
	fleetcrd "github.com/edgefleet/fleet/manifests/crd"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
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
	crds, err := clusterapi.CRDs()
	if err != nil {
		return err
	}
	fleetCRDs, err := fleetcrd.CRDs()
	if err != nil {
		return err
	}
	say("starting etcd and kube-apiserver (data in %s)…", o.DataDir)
	scheme := clusterapi.NewScheme()
	api, err := localkube.Start(localkube.Options{
		Dir: o.DataDir, BinDir: o.BinDir, Reset: o.Reset, ContextName: "fleet-dev",
		CRDs: append(crds, fleetCRDs...), Scheme: scheme,
	})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping kube-apiserver and etcd…")
		if err := api.Stop(); err != nil {
			say("%v", err)
		}
	}()
	say("installed %d Cluster API and %d fleet CRDs", len(crds), len(fleetCRDs))

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
	capiOpts := clusterapi.Options{
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
		return err
	}
	capiOpts.Name, capiOpts.Logger = "capi-kubeadm-bootstrap-controller-manager", o.Logger.WithName("cabpk")
	cabpkMgr, err := clusterapi.NewKubeadmBootstrapManager(ctx, cfg, scheme, capiOpts)
	if err != nil {
		return err
	}
	shutdown := 10 * time.Second
	hubMgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		GracefulShutdownTimeout: &shutdown,
		Logger:                  o.Logger.WithName("fleet-hub"),
	})
	if err != nil {
		return fmt.Errorf("creating fleet hub manager: %w", err)
	}
	if err := hubreconcilers.Setup(ctx, hubMgr, hubreconcilers.Options{Concurrency: 10, LinkThresholds: linkhealth.DefaultThresholds(),
		// Twice the gateway's default 5-minute lastSeenTime refresh, plus a minute.
		ContactTimeout: 11 * time.Minute}); err != nil {
		return err
	}
	gw, err := gateway.Setup(ctx, hubMgr, gateway.Options{
		Addr:           o.GatewayAddr,
		HubNamespace:   o.HubNamespace,
		DNSNames:       []string{"localhost"},
		IPs:            gatewayIPs(o.AdvertiseURL),
		ReplicaName:    "fleet-hub-dev",
		AdvertiseURL:   o.AdvertiseURL,
		LinkThresholds: linkhealth.DefaultThresholds(),
	})
	if err != nil {
		return err
	}

	say("starting the Cluster API core and kubeadm bootstrap reconcilers (v1.14.2) and the fleet hub…")
	managers := []ctrl.Manager{capiMgr, cabpkMgr, hubMgr}
	errs := make(chan error, len(managers))
	for _, m := range managers {
		go func() { errs <- m.Start(ctx) }()
	}
	var runErr error
	select {
	case <-gw.Ready():
		say("fleet hub %s is ready", version.Version)
		say("  kubeconfig: %s", api.Kubeconfig)
		say("  gateway:    %s (CA pin %s)", o.AdvertiseURL, gw.CA().Pin())
		say("  try:        KUBECONFIG=%s kubectl fleet token create", api.Kubeconfig)
	case err := <-errs:
		runErr = fmt.Errorf("a manager stopped while starting: %w", err)
		cancel()
	case <-ctx.Done():
	}
	// Wait for a manager to fail or for the end.
	stopped := 0
	if runErr != nil {
		stopped = 1
	} else {
		select {
		case err := <-errs:
			stopped = 1
			if err != nil && ctx.Err() == nil {
				runErr = fmt.Errorf("a manager stopped: %w", err)
			}
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

func gatewayIPs(advertise string) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	host := strings.TrimPrefix(advertise, "https://")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	return ips
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
