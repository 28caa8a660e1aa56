package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/fleetscheme"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
)

// run serves until ctx ends.
func run(ctx context.Context, cfg *rest.Config, o options) error {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "fleet-hub/" + version.Version
	mgr, err := newManager(cfg, o.manager)
	if err != nil {
		return err
	}
	if _, err := hub.Setup(ctx, mgr, o.hubOptions()); err != nil {
		return err
	}
	if err := addHealthChecks(mgr); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("Starting fleet-hub", "version", version.Version)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	return nil
}

// newScheme is fleetscheme's kinds and every built-in group: the hub's
// controllers and Cluster API's helpers read kinds beyond the CLI's few.
func newScheme() *runtime.Scheme {
	s := fleetscheme.New()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	return s
}

func newManager(cfg *rest.Config, o managerOptions) (ctrl.Manager, error) {
	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddr, SecureServing: o.secureMetrics}
	if o.secureMetrics {
		metricsOpts.FilterProvider = authnzFilter
	}
	if !o.enableHTTP2 {
		metricsOpts.TLSOpts = append(metricsOpts.TLSOpts, disableHTTP2)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  newScheme(),
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNamespace,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.retryPeriod,
		Cache:                   o.cacheOptions(),
		GracefulShutdownTimeout: &o.gracefulShutdownTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// cacheOptions: what the manager's informers hold. They hold every
// EdgeHost of the fleet; their managedFields, which the hub never reads,
// are kept out (memory per idle agent, and every deep copy). A patch or an
// update sent without them leaves the API server's as they are.
func (o managerOptions) cacheOptions() cache.Options {
	opts := cache.Options{SyncPeriod: &o.syncPeriod, DefaultTransform: cache.TransformStripManagedFields()}
	if o.watchNamespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{o.watchNamespace: {}}
	}
	return opts
}

// hubOptions are the flags as hub.Setup takes them.
func (o options) hubOptions() hub.Options {
	hOpts := hub.Options{Reconcilers: o.reconcilers}
	// Twice the refresh interval (what the gateway itself takes for fresh),
	// plus slack for a write that waited its turn.
	hOpts.Reconcilers.ContactTimeout = 2*o.gateway.LastSeenInterval + time.Minute
	if o.hooks.addr != "0" {
		names := trimList(o.hooks.dnsNames)
		if len(names) == 0 && o.hooks.service != "" {
			names = []string{o.hooks.service + "." + o.gateway.HubNamespace + ".svc"}
		}
		hOpts.InPlace = &inplace.Options{Addr: o.hooks.addr, Namespace: o.gateway.HubNamespace, DNSNames: names,
			Register: o.hooks.service != "", Service: o.hooks.service}
	}
	if o.disableGateway {
		return hOpts
	}
	gOpts := o.gateway
	gOpts.DNSNames = trimList(gOpts.DNSNames)
	gOpts.DisconnectGrace = zeroMeansNone(gOpts.DisconnectGrace)
	gOpts.WaveStatusDelay = zeroMeansNone(gOpts.WaveStatusDelay)
	gOpts.ReplicaName = replicaName()
	if o.reach.Addr != "0" {
		gOpts.ReplicaProxy = o.reach.peerAddress
	}
	hOpts.Gateway = &gOpts
	rOpts := o.reach.SetupOptions
	rOpts.Forward = o.reach.peerAddress != ""
	hOpts.Reach = &rOpts
	if o.hostAccess.addr != "0" {
		hOpts.HostAccess = &hostaccess.Options{Addr: o.hostAccess.addr, Namespace: o.gateway.HubNamespace,
			Register: o.hostAccess.service != "", Service: o.hostAccess.service, Forward: gOpts.ReplicaProxy != ""}
	}
	return hOpts
}

// replicaName names this replica in EdgeHost status: the pod's name
// (POD_NAME from the downward API, or the hostname a pod has anyway).
func replicaName() string {
	hostname, _ := os.Hostname()
	return envOr("POD_NAME", hostname)
}

func addHealthChecks(mgr ctrl.Manager) error {
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

// trimList drops the blanks around and the empty items between commas,
// as in "a, b,".
func trimList(items []string) []string {
	items = slices.Clone(items)
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return slices.DeleteFunc(items, func(s string) bool { return s == "" })
}
