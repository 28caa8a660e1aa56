package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetcrd "github.com/edgefleet/fleet/manifests/crd"
	"github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// HubNamespace keeps the hub's Secrets (the in-place hooks' CA).
const HubNamespace = "fleet-test-hub"

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

	env *envtest.Environment
	// frontProxyDir holds the aggregation layer's certificates.
	frontProxyDir string
	cancel        context.CancelFunc
	done          chan error
	managers      int
	webhooks      *clusterapi.Webhooks
	// providers are the Cluster API providers whose managers run here.
	providers []clusterapi.Provider
}

// Options tune Start.
type Options struct {
	// HubConcurrency is the number of workers per fleet reconciler.
	HubConcurrency int
	// ContactTimeout is the EdgeHost reconciler's (0: off).
	ContactTimeout time.Duration
	// APIServerOnly starts the API server with the CRDs and no managers,
	// for tests that run a hub of their own (such as the fleet-hub binary).
	APIServerOnly bool
	// NoCRDs starts the API server without any CRD (with APIServerOnly),
	// for tests that install them the way users do.
	NoCRDs bool
	// KubeadmBootstrap also installs the kubeadm bootstrap CRDs and runs
	// the real kubeadm bootstrap reconciler (CABPK) in its own manager.
	KubeadmBootstrap bool
	// KubeadmCRDs installs the kubeadm bootstrap and control plane CRDs
	// without their reconcilers, for tests that play CABPK themselves.
	KubeadmCRDs bool
	// KubeadmControlPlane also runs the real KubeadmControlPlane reconciler
	// in its own manager (needs KubeadmBootstrap).
	KubeadmControlPlane bool
	// NoHub leaves fleet's hub reconcilers out (the test runs its own hub).
	NoHub bool
	// EtcdFsync runs etcd with fsync, as in production. envtest turns it
	// off by default (--unsafe-no-fsync, as if its disk were memory), which
	// tests want; benchmarks of write paths should not.
	EtcdFsync bool
}

// Start brings up the API server and both managers. Stop must be called.
func Start(ctx context.Context, opts Options) (*Env, error) {
	e, err := startAPIServer(opts)
	if err != nil {
		return nil, err
	}
	ctx, e.cancel = context.WithCancel(ctx)
	if opts.APIServerOnly {
		return e, nil
	}
	managers, err := newManagers(ctx, e, opts)
	if err != nil {
		e.cancel()
		_ = e.env.Stop()
		return nil, err
	}
	e.start(ctx, managers)
	// Cluster API's webhooks, as a real install runs them: installed once
	// their servers answer, so no request meets an absent webhook.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.webhooks.WaitServing(wctx, e.providers...); err != nil {
		_ = e.Stop()
		return nil, err
	}
	if err := e.webhooks.Install(wctx, e.Client, e.providers...); err != nil {
		_ = e.Stop()
		return nil, err
	}
	return e, nil
}

// startAPIServer starts kube-apiserver and etcd with Cluster API's CRDs
// (the groups opts needs) and fleet's.
func startAPIServer(opts Options) (*Env, error) {
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
	scheme := clusterapi.NewScheme()
	groups := []string{clusterapi.CoreGroup}
	if opts.KubeadmBootstrap || opts.KubeadmCRDs {
		groups = append(groups, clusterapi.BootstrapGroup, clusterapi.ControlPlaneGroup)
	}
	crds, err := clusterapi.CRDs(groups...)
	if err != nil {
		return nil, err
	}
	fleetCRDs, err := fleetcrd.CRDs()
	if err != nil {
		return nil, err
	}
	allCRDs := append(crds, fleetCRDs...)
	if opts.NoCRDs {
		allCRDs = nil
	}
	e := &Env{
		Scheme: scheme,
		env: &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDs:                  allCRDs,
			Scheme:                scheme,
		},
		done: make(chan error, 3),
	}
	if opts.EtcdFsync {
		e.env.ControlPlane.Etcd = &envtest.Etcd{}
		e.env.ControlPlane.Etcd.Configure().Set("unsafe-no-fsync", "false")
	}
	// The aggregation layer, for the hub's host-access API.
	if e.frontProxyDir, err = os.MkdirTemp("", "fleet-front-proxy-"); err != nil {
		return nil, err
	}
	e.env.ControlPlane.APIServer = &envtest.APIServer{}
	if err := localkube.EnableAggregation(e.env.ControlPlane.APIServer, e.frontProxyDir); err != nil {
		return nil, err
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
	return e, nil
}

// newManagers makes the managers opts asks for: Cluster API core, CABPK
// and KCP as their own binaries run them, and fleet's hub reconcilers.
func newManagers(ctx context.Context, e *Env, opts Options) ([]ctrl.Manager, error) {
	capiOpts := clusterapi.Options{
		Name: "capi-test-manager",
		// Tests tear the whole API server down next; no need to wait the
		// default 30 s for in-flight reconciles against it.
		GracefulShutdownTimeout: 5 * time.Second,
		// Reconnect quickly; production waits 30 s between attempts.
		ConnectionRetryInterval: 2 * time.Second,
		SkipNameValidation:      true,
		Logger:                  log.Log.WithName("capi"),
	}
	if err := clusterapi.EnableFeatureGates(); err != nil {
		return nil, err
	}
	var err error
	if e.webhooks, err = clusterapi.NewWebhooks("127.0.0.1"); err != nil {
		return nil, err
	}
	capiOpts.Webhooks = e.webhooks
	capiMgr, err := clusterapi.NewCoreManager(ctx, e.Config, e.Scheme, capiOpts)
	if err != nil {
		return nil, err
	}
	managers := []ctrl.Manager{capiMgr}
	e.providers = append(e.providers, clusterapi.ProviderCore)
	if opts.KubeadmBootstrap {
		capiOpts.Name, capiOpts.Logger = "cabpk-test-manager", log.Log.WithName("cabpk")
		m, err := clusterapi.NewKubeadmBootstrapManager(ctx, e.Config, e.Scheme, capiOpts)
		if err != nil {
			return nil, err
		}
		managers = append(managers, m)
		e.providers = append(e.providers, clusterapi.ProviderKubeadmBootstrap)
	}
	if opts.KubeadmBootstrap && opts.KubeadmControlPlane {
		capiOpts.Name, capiOpts.Logger = "kcp-test-manager", log.Log.WithName("kcp")
		m, err := clusterapi.NewKubeadmControlPlaneManager(ctx, e.Config, e.Scheme, capiOpts)
		if err != nil {
			return nil, err
		}
		managers = append(managers, m)
		e.providers = append(e.providers, clusterapi.ProviderKubeadmControlPlane)
	}
	if opts.NoHub {
		return managers, nil
	}
	hubMgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                  e.Scheme,
		GracefulShutdownTimeout: ptr.To(5 * time.Second),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		Logger:                  log.Log.WithName("fleet-hub"),
	})
	if err != nil {
		return nil, fmt.Errorf("creating fleet hub manager: %w", err)
	}
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: HubNamespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", HubNamespace, err)
	}
	// The reconcilers and the in-place hooks: a test adds a gateway where
	// it needs agents.
	if _, err := hub.Setup(ctx, hubMgr, hub.Options{Reconcilers: hubreconcilers.Options{
		Concurrency:        max(opts.HubConcurrency, 4),
		SkipNameValidation: true,
		ContactTimeout:     opts.ContactTimeout,
	}, InPlace: &inplace.Options{Addr: "127.0.0.1:0", Namespace: HubNamespace, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Register: true}}); err != nil {
		return nil, err
	}
	return append(managers, hubMgr), nil
}

func (e *Env) start(ctx context.Context, managers []ctrl.Manager) {
	e.managers = len(managers)
	for _, m := range managers {
		go func() { e.done <- m.Start(ctx) }()
	}
}

// EtcdURL is where etcd serves clients (and its /metrics).
func (e *Env) EtcdURL() string {
	if e.env.ControlPlane.Etcd == nil || e.env.ControlPlane.Etcd.URL == nil {
		return ""
	}
	return e.env.ControlPlane.Etcd.URL.String()
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
	_ = os.RemoveAll(e.frontProxyDir)
	return errors.Join(errs...)
}

// CreateKubeconfigSecret writes <cluster>-kubeconfig pointing back at this
// API server, which then plays the workload cluster too. Create it before
// the Cluster's infrastructure is provisioned, or core tries to generate
// one from a CA that tests do not make.
func (e *Env) CreateKubeconfigSecret(ctx context.Context, cluster *clusterv1.Cluster) error {
	return e.Client.Create(ctx, kubeconfig.GenerateSecret(cluster, kubeconfig.FromEnvTestConfig(e.Config, cluster)))
}

// UserConfig is a rest config of a user named name in groups, with no
// rights but those RBAC gives them, for tests of authorization.
func (e *Env) UserConfig(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return u.Config(), nil
}

// FrontProxyCertificate is the aggregation layer's client certificate,
// for tests that call an extension API server as the API server does.
func (e *Env) FrontProxyCertificate() (tls.Certificate, error) {
	return tls.LoadX509KeyPair(filepath.Join(e.frontProxyDir, "front-proxy-client.crt"),
		filepath.Join(e.frontProxyDir, "front-proxy-client.key"))
}

// WriteKubeconfig writes an administrator's kubeconfig for this API server
// to path, for the binaries a test runs (clusterctl, fleet-hub).
func (e *Env) WriteKubeconfig(path string) error { return WriteKubeconfigOf(e.Config, path) }

// WriteKubeconfigOf writes a kubeconfig of cfg (a client certificate's) to
// path.
func WriteKubeconfigOf(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["hub"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "hub"}
	kc.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing a kubeconfig for the test API server: %w", err)
	}
	return nil
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

// NewNamespace is CreateNamespace for a test, which it fails on error.
func (e *Env) NewNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns, err := e.CreateNamespace(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ns
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
