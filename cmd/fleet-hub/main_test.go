package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func freeAddr(t *testing.T) string { return testkit.FreeAddr(t) }

// newFlagSet is the default command's flags bound to o, for tests that
// call run directly.
func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("fleet-hub", pflag.ContinueOnError)
	o.addFlags(fs)
	return fs
}

// The fleet-hub command serves health, readiness and metrics, takes the
// leader Lease, runs the reconcilers, and stops cleanly.
func TestHubServesAndReconciles(t *testing.T) {
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{APIServerOnly: true})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	var o options
	fs := newFlagSet(&o)
	probe, metrics := freeAddr(t), freeAddr(t)
	if err := fs.Parse([]string{
		"--health-probe-bind-address=" + probe,
		"--metrics-bind-address=" + metrics,
		"--metrics-secure=false",
		"--leader-election-namespace=default",
		"--gateway-bind-address=" + freeAddr(t),
		"--proxy-bind-address=" + freeAddr(t),
		"--hub-namespace=default",
		"--gateway-ips=127.0.0.1",
		"--runtime-extension-bind-address=127.0.0.1:0",
		"--runtime-extension-service=",
		"--host-access-bind-address=127.0.0.1:0",
		"--host-access-service=",
	}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, env.Config, o) }()

	waitFor(t, "readyz", func() error { return httpOK("http://" + probe + "/readyz") })
	if err := httpOK("http://" + probe + "/healthz"); err != nil {
		t.Error(err)
	}
	waitFor(t, "leader Lease", func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: o.manager.leaderElectionID}, &coordinationv1.Lease{})
	})

	// The reconcilers run: a new host is protected and reported Available.
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "default"}}
	if err := env.Client.Create(ctx, h); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host reconciled", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			return err
		}
		if h.Status.Phase != infrav1.HostAvailable || len(h.Finalizers) != 1 {
			return fmt.Errorf("phase %q finalizers %v", h.Status.Phase, h.Finalizers)
		}
		return nil
	})
	// The fleet's gauges match its objects, from the hub's cache.
	writeFleet(t, env)
	var body string
	waitFor(t, "fleet metrics", func() error {
		if body, err = httpGet("http://" + metrics + "/metrics"); err != nil {
			return err
		}
		return fleetMetricsMatch(body)
	})
	checkMonitoringUsesExportedMetrics(t, body)
	for _, want := range []string{`controller_runtime_reconcile_total{controller="edgehost"`, "fleet_gateway_connected_agents"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The gateway made the hub CA and keeps it in a Secret.
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fleet-hub-ca"}, &corev1.Secret{}); err != nil {
		t.Errorf("hub CA Secret: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v after shutdown", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("fleet-hub did not stop within 60s of its context ending")
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url) //nolint:gosec // test-local address
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

func httpOK(url string) error {
	_, err := httpGet(url)
	return err
}

func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The informers keep no managedFields: the hub never reads them, and with
// every EdgeHost of a fleet cached they are memory per agent.
func TestCacheKeepsNoManagedFields(t *testing.T) {
	o := managerOptions{watchNamespace: "stores"}
	opts := o.cacheOptions()
	if _, ok := opts.DefaultNamespaces["stores"]; !ok || len(opts.DefaultNamespaces) != 1 {
		t.Errorf("--watch-namespace stores: the cache watches %v", opts.DefaultNamespaces)
	}
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "store-1", Namespace: "stores",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "fleet-hub", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	if opts.DefaultTransform == nil {
		t.Fatal("the cache has no transform: it keeps every object's managedFields")
	}
	out, err := opts.DefaultTransform(host)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*infrav1.EdgeHost); len(got.ManagedFields) != 0 || got.Name != "store-1" {
		t.Errorf("cached EdgeHost: name %q, managedFields %v; want store-1 without managedFields", got.Name, got.ManagedFields)
	}
}
