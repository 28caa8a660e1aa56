package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/reconcilers/kubeadmconfig"
	kubeadmsetup "sigs.k8s.io/cluster-api/bootstrap/kubeadm/setup"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	capicluster "sigs.k8s.io/cluster-api/core/reconcilers/cluster"
	capimachine "sigs.k8s.io/cluster-api/core/reconcilers/machine"
	capimd "sigs.k8s.io/cluster-api/core/reconcilers/machinedeployment"
	capims "sigs.k8s.io/cluster-api/core/reconcilers/machineset"
	capisetup "sigs.k8s.io/cluster-api/core/setup"
	"sigs.k8s.io/cluster-api/util/index"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	hubcontrollers "github.com/edgefleet/fleet/pkg/hub/controllers"
)

// ErrNoAssets means the kube-apiserver and etcd binaries are missing.
var ErrNoAssets = errors.New("kube-apiserver/etcd binaries not found: run `make test`, which builds them into bin/k8s, or set KUBEBUILDER_ASSETS")

// Env is a running API server with Cluster API and fleet's hub reconcilers.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client talks to the API server directly, without a cache, so tests
	// always read what is stored.
	Client client.Client
	// Scheme knows core, Cluster API and fleet kinds.
	Scheme *runtime.Scheme

	env      *envtest.Environment
	cancel   context.CancelFunc
	done     chan error
	managers int
}

// Options tune Start.
type Options struct {
	// HubConcurrency is the number of workers per fleet reconciler.
	HubConcurrency int
	// APIServerOnly starts the API server with the CRDs and no managers,
	// for tests that run a hub of their own (such as the fleet-hub binary).
	APIServerOnly bool
	// KubeadmBootstrap also installs the kubeadm bootstrap CRDs and runs
	// the real kubeadm bootstrap reconciler (CABPK) in its own manager.
	KubeadmBootstrap bool
	// NoHub leaves fleet's hub reconcilers out (the test runs its own hub).
	NoHub bool
}

// Start brings up the API server and both managers. Stop must be called.
func Start(ctx context.Context, opts Options) (*Env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%w (looked in %s)", ErrNoAssets, assets)
		}
	}
	capiDir, err := moduleDir(root, "sigs.k8s.io/cluster-api")
	if err != nil {
		return nil, err
	}

	scheme := hubcontrollers.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(bootstrapv1.AddToScheme(scheme))
	utilruntime.Must(controlplanev1.AddToScheme(scheme))
	var extraCRDs []*apiextensionsv1.CustomResourceDefinition
	if opts.KubeadmBootstrap {
		if extraCRDs, err = kubeadmCRDs(capiDir); err != nil {
			return nil, err
		}
	}

	e := &Env{
		Scheme: scheme,
		env: &envtest.Environment{
			BinaryAssetsDirectory: assets,
			ErrorIfCRDPathMissing: true,
			CRDDirectoryPaths: []string{
				filepath.Join(capiDir, "core", "config", "crd", "bases"),
				filepath.Join(root, "manifests", "crd"),
			},
			CRDs:   extraCRDs,
			Scheme: scheme,
		},
		done: make(chan error, 3),
	}
	cfg, err := e.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	e.Config = cfg
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = e.env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}

	ctx, e.cancel = context.WithCancel(ctx)
	if opts.APIServerOnly {
		return e, nil
	}
	capiMgr, err := newCAPIManager(ctx, cfg, scheme)
	if err != nil {
		e.cancel()
		_ = e.env.Stop()
		return nil, err
	}
	managers := []ctrl.Manager{capiMgr}
	if opts.KubeadmBootstrap {
		m, err := newKubeadmBootstrapManager(ctx, cfg, scheme)
		if err != nil {
			e.cancel()
			_ = e.env.Stop()
			return nil, err
		}
		managers = append(managers, m)
	}
	if opts.NoHub {
		e.start(ctx, managers)
		return e, nil
	}
	hubMgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		GracefulShutdownTimeout: ptrDuration(5 * time.Second),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Logger:                  log.Log.WithName("fleet-hub"),
	})
	if err != nil {
		e.cancel()
		_ = e.env.Stop()
		return nil, fmt.Errorf("creating fleet hub manager: %w", err)
	}
	if err := hubcontrollers.Setup(ctx, hubMgr, hubcontrollers.Options{
		Concurrency:        max(opts.HubConcurrency, 4),
		SkipNameValidation: true,
	}); err != nil {
		e.cancel()
		_ = e.env.Stop()
		return nil, err
	}
	e.start(ctx, append(managers, hubMgr))
	return e, nil
}

func (e *Env) start(ctx context.Context, managers []ctrl.Manager) {
	e.managers = len(managers)
	for _, m := range managers {
		go func() { e.done <- m.Start(ctx) }()
	}
}

// kubeadmCRDs loads the kubeadm bootstrap and control-plane CRDs from the
// Cluster API module and adds the contract label that kustomize adds in
// real installs.
func kubeadmCRDs(capiDir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, dir := range []string{
		filepath.Join(capiDir, "bootstrap", "kubeadm", "config", "crd", "bases"),
		filepath.Join(capiDir, "controlplane", "kubeadm", "config", "crd", "bases"),
	} {
		crds, err := loadCRDs(dir)
		if err != nil {
			return nil, err
		}
		out = append(out, crds...)
	}
	return out, nil
}

func loadCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading CRDs: %w", err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, crd); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", e.Name(), err)
		}
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels["cluster.x-k8s.io/v1beta2"] = "v1beta2"
		out = append(out, crd)
	}
	return out, nil
}

// newKubeadmBootstrapManager runs the real CABPK reconciler the way its own
// binary does: its own cache and client options, secret-caching client and
// ClusterCache (core's would strip the Secret data CABPK needs).
func newKubeadmBootstrapManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Cache:                   kubeadmsetup.ManagerCacheOptions(scheme, "cabpk-test-manager", "", 10*time.Minute),
		GracefulShutdownTimeout: ptrDuration(5 * time.Second),
		Client:                  kubeadmsetup.ManagerClientOptions(),
		Logger:                  log.Log.WithName("cabpk"),
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
		Client:       kubeadmsetup.ClusterCacheClientOptions("cabpk-test-manager", 20, 30),
	}, controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptrTrue()})
	if err != nil {
		return nil, fmt.Errorf("setting up CABPK ClusterCache: %w", err)
	}
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	if err := (&kubeadmconfig.Reconciler{
		Client:              mgr.GetClient(),
		SecretCachingClient: secretCachingClient,
		APIReader:           mgr.GetAPIReader(),
		ClusterCache:        cc,
		TokenTTL:            kubeadmconfig.DefaultTokenTTL,
	}).SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptrTrue()}); err != nil {
		return nil, fmt.Errorf("setting up KubeadmConfig reconciler: %w", err)
	}
	return mgr, nil
}

// newCAPIManager wires the real Cluster API core reconcilers the way
// capi-controller-manager does, with core's own cache and client options.
func newCAPIManager(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   capisetup.ManagerCacheOptions(scheme, "capi-test-manager", "", 10*time.Minute),
		// Tests tear the whole API server down next; no need to wait the
		// default 30 s for in-flight reconciles against it.
		GracefulShutdownTimeout: ptrDuration(5 * time.Second),
		Client:                  capisetup.ManagerClientOptions(),
		Logger:                  log.Log.WithName("capi"),
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
		Client:       capisetup.ClusterCacheClientOptions("capi-test-manager", 20, 30),
	}, controller.Options{MaxConcurrentReconciles: 10, SkipNameValidation: ptrTrue()})
	if err != nil {
		return nil, fmt.Errorf("setting up ClusterCache: %w", err)
	}
	// Reconnect quickly in tests; production waits 30 s between attempts.
	if s, ok := cc.(interface{ SetConnectionCreationRetryInterval(time.Duration) }); ok {
		s.SetConnectionCreationRetryInterval(2 * time.Second)
	}
	copts := controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptrTrue()}
	if err := (&capicluster.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConnectionGracePeriod: 50 * time.Second}).SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up Cluster reconciler: %w", err)
	}
	if err := (&capimachine.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc,
		RemoteConditionsGracePeriod: 5 * time.Minute}).SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up Machine reconciler: %w", err)
	}
	if err := (&capims.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ClusterCache: cc}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up MachineSet reconciler: %w", err)
	}
	if err := (&capimd.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).
		SetupWithManager(ctx, mgr, copts); err != nil {
		return nil, fmt.Errorf("setting up MachineDeployment reconciler: %w", err)
	}
	return mgr, nil
}

// Stop shuts the managers down, then the API server and etcd.
func (e *Env) Stop() error {
	e.cancel()
	var errs []error
	for range e.managers {
		select {
		case err := <-e.done:
			if err != nil {
				errs = append(errs, err)
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, errors.New("timed out waiting for managers to stop"))
		}
	}
	if err := e.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping kube-apiserver and etcd: %w", err))
	}
	return errors.Join(errs...)
}

// CreateKubeconfigSecret writes <cluster>-kubeconfig pointing back at this
// API server, which then plays the workload cluster too. Create it before
// the Cluster's infrastructure is provisioned, or core tries to generate
// one from a CA that tests do not make.
func (e *Env) CreateKubeconfigSecret(ctx context.Context, cluster *clusterv1.Cluster) error {
	return e.Client.Create(ctx, kubeconfig.GenerateSecret(cluster, kubeconfig.FromEnvTestConfig(e.Config, cluster)))
}

// CreateNamespace makes a fresh namespace for one test.
func (e *Env) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{}
	ns.GenerateName = prefix + "-"
	if err := e.Client.Create(ctx, ns); err != nil {
		return "", fmt.Errorf("creating namespace: %w", err)
	}
	return ns.Name, nil
}

func ptrDuration(d time.Duration) *time.Duration { return &d }

func ptrTrue() *bool {
	t := true
	return &t
}

// repoRoot finds the directory of the fleet module's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/edgefleet/fleet\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the fleet repository root (go.mod of github.com/edgefleet/fleet)")
		}
		dir = parent
	}
}

// moduleDir returns where the go command keeps a dependency's source, for
// the CRDs Cluster API ships in its module.
func moduleDir(root, module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded; run `go mod download`", module)
	}
	return dir, nil
}
