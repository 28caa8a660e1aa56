// Command capimanager runs the real Cluster API v1.14.2 reconcilers the
// benchmarks need — core (with ClusterClass and managed topologies), the
// kubeadm bootstrap provider and KubeadmControlPlane — with their admission
// webhooks, in a process of its own, so that a benchmark measures their
// memory and CPU apart from the hub's and from the driver's agents. It
// prints "ready <metrics URL>" once its webhooks are installed; the
// metrics are controller-runtime's registry (client-go's
// rest_client_requests_total among them).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
)

func main() {
	// A flag set of its own: controller-runtime registers --kubeconfig on
	// the global one.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "The management cluster's kubeconfig.")
	concurrency := fs.Int("concurrency", 10, "Workers per reconciler.")
	qps := fs.Float64("kube-api-qps", 100, "Each manager's client QPS to the management cluster.")
	burst := fs.Int("kube-api-burst", 200, "Each manager's client burst.")
	metricsAddr := fs.String("metrics-bind-address", "127.0.0.1:0", "Where the metrics are served.")
	_ = fs.Parse(os.Args[1:])
	if err := run(*kubeconfig, *concurrency, float32(*qps), *burst, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig string, concurrency int, qps float32, burst int, metricsAddr string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	ctrl.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = qps, burst
	if err := clusterapi.EnableFeatureGates(); err != nil {
		return err
	}
	scheme := clusterapi.NewScheme()
	hooks, err := clusterapi.NewWebhooks("127.0.0.1")
	if err != nil {
		return err
	}
	o := clusterapi.Options{Concurrency: concurrency, GracefulShutdownTimeout: 5 * time.Second,
		// The three managers share a process (their binaries each have one).
		SkipNameValidation: true, Logger: logr.Discard(), Webhooks: hooks}
	type maker func(context.Context, *clusterapi.Options) (ctrl.Manager, error)
	makers := []struct {
		name     string
		provider clusterapi.Provider
		make     maker
	}{
		{"capi-bench", clusterapi.ProviderCore, func(ctx context.Context, o *clusterapi.Options) (ctrl.Manager, error) {
			return clusterapi.NewCoreManager(ctx, cfg, scheme, *o)
		}},
		{"cabpk-bench", clusterapi.ProviderKubeadmBootstrap, func(ctx context.Context, o *clusterapi.Options) (ctrl.Manager, error) {
			return clusterapi.NewKubeadmBootstrapManager(ctx, cfg, scheme, *o)
		}},
		{"kcp-bench", clusterapi.ProviderKubeadmControlPlane, func(ctx context.Context, o *clusterapi.Options) (ctrl.Manager, error) {
			return clusterapi.NewKubeadmControlPlaneManager(ctx, cfg, scheme, *o)
		}},
	}
	errs := make(chan error, len(makers))
	var providers []clusterapi.Provider
	for _, m := range makers {
		o.Name = m.name
		mgr, err := m.make(ctx, &o)
		if err != nil {
			return err
		}
		providers = append(providers, m.provider)
		go func() { errs <- mgr.Start(ctx) }()
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := hooks.WaitServing(wctx, providers...); err != nil {
		return err
	}
	if err := hooks.Install(wctx, c, providers...); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ready http://%s/metrics\n", ln.Addr())
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		return fmt.Errorf("a Cluster API manager stopped: %w", err)
	}
}
