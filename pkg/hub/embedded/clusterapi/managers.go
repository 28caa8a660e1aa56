package clusterapi

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/controlplane/kubeadm/reconcilers/kubeadmcontrolplane"
	kcpsetup "sigs.k8s.io/cluster-api/controlplane/kubeadm/setup"
	capicluster "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	capiclusterclass "sigs.k8s.io/cluster-api/core/reconcilers/clusterclass"
	capiextensionconfig "sigs.k8s.io/cluster-api/core/reconcilers/extensionconfig"
	capimachine "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	capimd "sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	capimhc "sigs.k8s.io/cluster-api/core/reconcilers/machinehealthcheck"
	capims "sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	topologycluster "sigs.k8s.io/cluster-api/core/reconcilers/topology/cluster"
	topologymachinedeployment "sigs.k8s.io/cluster-api/core/reconcilers/topology/machinedeployment"
	topologymachineset "sigs.k8s.io/cluster-api/core/reconcilers/topology/machineset"
	capisetup "sigs.k8s.io/cluster-api/core/setup"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/cluster-api/feature"
	"sigs.k8s.io/cluster-api/util/index"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options tune the managers.
type Options struct {
	// Name identifies the manager's clients to the API server.
	Name string
	// Concurrency is the number of workers per reconciler (default 4).
	Concurrency int
	// ConnectionRetryInterval is how long ClusterCache waits before it
	// dials a workload cluster again after a failure; Cluster API's
	// binaries wait 30 s (the default), tests and the demo less.
	ConnectionRetryInterval time.Duration
	// GracefulShutdownTimeout bounds the wait for in-flight reconciles.
	GracefulShutdownTimeout time.Duration
	// SkipNameValidation allows several managers with the same controller
	// names in one process (tests).
	SkipNameValidation bool
	// Logger of the manager.
	Logger logr.Logger
	// Webhooks, when set, makes each manager serve its provider's
	// admission webhooks, as Cluster API's binaries do.
	Webhooks *Webhooks
}

// EnableFeatureGates turns on, for this process, the Cluster API feature
// gates fleet relies on: ClusterTopology (ClusterClass and managed
// topologies), RuntimeSDK and InPlaceUpdates (hosts upgraded where they
// stand), as a real management cluster needs with CLUSTER_TOPOLOGY=true,
// EXP_RUNTIME_SDK=true and EXP_IN_PLACE_UPDATES=true (docs/INSTALL.md).
// Call it before making managers.
func EnableFeatureGates() error {
	for _, g := range []featuregate.Feature{feature.ClusterTopology, feature.RuntimeSDK, feature.InPlaceUpdates} {
		if err := feature.MutableGates.Set(string(g) + "=true"); err != nil {
			return fmt.Errorf("enabling Cluster API's %s feature gate: %w", g, err)
		}
	}
	return nil
}

// webhookServer is provider p's webhook server, or nil (none) without
// Webhooks.
func (o Options) webhookServer(p Provider) webhook.Server {
	if o.Webhooks == nil {
		return nil
	}
	return o.Webhooks.server(p)
}

func (o Options) controller(n int) controller.Options {
	c := controller.Options{MaxConcurrentReconciles: n}
	if o.SkipNameValidation {
		t := true
		c.SkipNameValidation = &t
	}
	return c
}

func (o Options) concurrency() int {
	if o.Concurrency > 0 {
		return o.Concurrency
	}
	return 4
}

func (o Options) setRetry(cc clustercache.ClusterCache) {
	if o.ConnectionRetryInterval <= 0 {
		return
	}
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(o.ConnectionRetryInterval)
	}
}

// NewCoreManager wires the real Cluster API core reconcilers (Cluster,
// Machine, MachineSet, MachineDeployment, MachineHealthCheck) the way
// capi-controller-manager does, with core's own cache and client options.
func NewCoreManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Cache:                   capisetup.ManagerCacheOptions(scheme, o.Name, "", 10*time.Minute),
		GracefulShutdownTimeout: &o.GracefulShutdownTimeout,
		Client:                  capisetup.ManagerClientOptions(),
		Logger:                  o.Logger,
		WebhookServer:           o.webhookServer(ProviderCore),
	})
	if err != nil {
		return nil, fmt.Errorf("creating Cluster API manager: %w", err)
	}
	if err := index.AddDefaultIndexes(ctx, mgr); err != nil {
		return nil, fmt.Errorf("adding Cluster API indexes: %w", err)
	}
	secretCachingClient, err := capisetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        capisetup.ClusterCacheCacheOptions(),
		Client:       capisetup.ClusterCacheClientOptions(o.Name, 20, 30),
	}, o.controller(10))
	if err != nil {
		return nil, fmt.Errorf("setting up ClusterCache: %w", err)
	}
	o.setRetry(cc)
	if o.Webhooks != nil {
		if err := setupCoreWebhooks(mgr, cc); err != nil {
			return nil, err
		}
	}
	copts := o.controller(o.concurrency())
	rc, err := setupRuntimeSDK(ctx, mgr, o)
	if err != nil {
		return nil, err
	}
	if err := (&capicluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConnectionGracePeriod: 50 * time.Second}).SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up Cluster reconciler: %w", err)
	}
	if err := (&capimachine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RuntimeClient: rc, RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up Machine reconciler: %w", err)
	}
	if err := (&capims.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up MachineSet reconciler: %w", err)
	}
	if err := (&capimd.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), RuntimeClient: rc}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up MachineDeployment reconciler: %w", err)
	}
	// ClusterClass and managed topologies, behind their feature gate as in
	// capi-controller-manager.
	if feature.Gates.Enabled(feature.ClusterTopology) {
		if err := setupTopology(ctx, mgr, cc, rc, o); err != nil {
			return nil, err
		}
	}
	// MachineHealthCheck reads Nodes through ClusterCache, as the others.
	if err := (&capimhc.Reconciler{Client: mgr.GetClient(), ClusterCache: cc}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up MachineHealthCheck reconciler: %w", err)
	}
	return mgr, nil
}

// setupTopology adds core's ClusterClass and topology reconcilers.
func setupTopology(ctx context.Context, mgr ctrl.Manager, cc clustercache.ClusterCache, rc runtimeclient.Client, o Options) error {
	copts := o.controller(o.concurrency())
	if err := (&capiclusterclass.Reconciler{Client: mgr.GetClient(), RuntimeClient: rc}).SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up ClusterClass reconciler: %w", err)
	}
	if err := (&topologycluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc, RuntimeClient: rc}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up ClusterTopology reconciler: %w", err)
	}
	if err := (&topologymachinedeployment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up MachineDeploymentTopology reconciler: %w", err)
	}
	if err := (&topologymachineset.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up MachineSetTopology reconciler: %w", err)
	}
	return nil
}

// setupRuntimeSDK adds, behind the RuntimeSDK gate, core's ExtensionConfig
// reconciler (it injects CA bundles, discovers and registers extensions)
// with a runtime client for the reconcilers; nil without the gate.
func setupRuntimeSDK(ctx context.Context, mgr ctrl.Manager, o Options) (runtimeclient.Client, error) {
	if !feature.Gates.Enabled(feature.RuntimeSDK) {
		return nil, nil
	}
	rc, err := NewRuntimeClient(mgr.GetClient())
	if err != nil {
		return nil, err
	}
	secrets, err := partialSecretCache(mgr)
	if err != nil {
		return nil, err
	}
	if err := (&capiextensionconfig.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		RuntimeClient: rc, PartialSecretCache: secrets}).SetupWithManager(ctx, mgr, o.controller(2)); err != nil {
		return nil, fmt.Errorf("setting up ExtensionConfig reconciler: %w", err)
	}
	return rc, nil
}

// partialSecretCache is the metadata-only Secret cache the ExtensionConfig
// reconciler watches CA Secrets with, as capi-controller-manager makes it.
func partialSecretCache(mgr ctrl.Manager) (ctrlcache.Cache, error) {
	c, err := ctrlcache.New(mgr.GetConfig(), ctrlcache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		DefaultTransform: func(in any) (any, error) {
			obj, ok := in.(*metav1.PartialObjectMetadata)
			if !ok || obj.GetObjectKind().GroupVersionKind() != corev1.SchemeGroupVersion.WithKind("Secret") {
				return nil, fmt.Errorf("the partial Secret cache got a %T", in)
			}
			return ctrlcache.TransformStripManagedFields()(obj)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the metadata-only Secret cache: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the metadata-only Secret cache: %w", err)
	}
	return c, nil
}

// NewKubeadmBootstrapManager runs the real kubeadm bootstrap reconciler
// (CABPK) the way its own binary does: its own cache and client options,
// secret-caching client and ClusterCache (core's would strip the Secret
// data CABPK needs).
func NewKubeadmBootstrapManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Cache:                   kubeadmsetup.ManagerCacheOptions(scheme, o.Name, "", 10*time.Minute),
		GracefulShutdownTimeout: &o.GracefulShutdownTimeout,
		Client:                  kubeadmsetup.ManagerClientOptions(),
		Logger:                  o.Logger,
		WebhookServer:           o.webhookServer(ProviderKubeadmBootstrap),
	})
	if err != nil {
		return nil, fmt.Errorf("creating kubeadm bootstrap manager: %w", err)
	}
	secretCachingClient, err := kubeadmsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        kubeadmsetup.ClusterCacheCacheOptions(),
		Client:       kubeadmsetup.ClusterCacheClientOptions(o.Name, 20, 30),
	}, o.controller(o.concurrency()))
	if err != nil {
		return nil, fmt.Errorf("setting up kubeadm bootstrap ClusterCache: %w", err)
	}
	o.setRetry(cc)
	if err := (&kubeadmconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        cc,
		TokenTTL:            kubeadmconfig.DefaultTokenTTL,
	}).SetupWithManager(ctx, mgr, o.controller(o.concurrency())); err != nil {
		return nil, fmt.Errorf("setting up KubeadmConfig reconciler: %w", err)
	}
	if o.Webhooks != nil {
		if err := setupKubeadmBootstrapWebhooks(mgr); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// NewKubeadmControlPlaneManager runs the real KubeadmControlPlane
// reconciler the way its own binary does: its own cache and client
// options, secret-caching client and ClusterCache.
func NewKubeadmControlPlaneManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, o Options) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Cache:                   kcpsetup.ManagerCacheOptions(scheme, o.Name, "", 10*time.Minute),
		GracefulShutdownTimeout: &o.GracefulShutdownTimeout,
		Client:                  kcpsetup.ManagerClientOptions(),
		Logger:                  o.Logger,
		WebhookServer:           o.webhookServer(ProviderKubeadmControlPlane),
	})
	if err != nil {
		return nil, fmt.Errorf("creating kubeadm control plane manager: %w", err)
	}
	secretCachingClient, err := kcpsetup.CreateSecretCachingClient(mgr)
	if err != nil {
		return nil, fmt.Errorf("creating secret caching client: %w", err)
	}
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: secretCachingClient,
		Cache:        kcpsetup.ClusterCacheCacheOptions(),
		Client:       kcpsetup.ClusterCacheClientOptions(o.Name, 20, 30),
	}, o.controller(o.concurrency()))
	if err != nil {
		return nil, fmt.Errorf("setting up kubeadm control plane ClusterCache: %w", err)
	}
	o.setRetry(cc)
	// KCP asks CanUpdateMachine through its own runtime client, whose
	// registry a read-only ExtensionConfig reconciler fills.
	var rc runtimeclient.Client
	if feature.Gates.Enabled(feature.InPlaceUpdates) {
		c, err := NewRuntimeClient(mgr.GetClient())
		if err != nil {
			return nil, err
		}
		if err := (&capiextensionconfig.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
			RuntimeClient: c, ReadOnly: true}).SetupWithManager(ctx, mgr, o.controller(2)); err != nil {
			return nil, fmt.Errorf("setting up KCP's ExtensionConfig reconciler: %w", err)
		}
		rc = c
	}
	if err := (&kubeadmcontrolplane.Reconciler{
		Client:                      mgr.GetClient(),
		APIReader:                   mgr.GetAPIReader(),
		SecretCachingClient:         secretCachingClient,
		ClusterCache:                cc,
		EtcdDialTimeout:             10 * time.Second,
		EtcdCallTimeout:             15 * time.Second,
		RemoteConditionsGracePeriod: 5 * time.Minute,
		RuntimeClient:               rc,
	}).SetupWithManager(ctx, mgr, o.controller(o.concurrency())); err != nil {
		return nil, fmt.Errorf("setting up KubeadmControlPlane reconciler: %w", err)
	}
	if o.Webhooks != nil {
		if err := setupKubeadmControlPlaneWebhooks(mgr); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}
