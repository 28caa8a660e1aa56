package hub

import (
	"context"
	"fmt"
	"net/http"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/edgefleet/fleet/pkg/hub/gateway"
	"github.com/edgefleet/fleet/pkg/hub/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/inplace"
	"github.com/edgefleet/fleet/pkg/hub/reach"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// Options put a hub together: each room's own options.
type Options struct {
	// Reconcilers are the EdgeMachine, EdgeCluster and EdgeHost
	// reconcilers; they always run.
	Reconcilers reconcilers.Options
	// Gateway is the agent gateway; nil runs none, and so no edge reach
	// (a hub serving only the Cluster API contract, e.g. a test's).
	Gateway *gateway.Options
	// Reach is edge reach, which carries Cluster API's connections over
	// the gateway's sessions; nil or an Addr of "0" runs only the
	// reconciler that takes an earlier run's proxy-url out of kubeconfigs.
	Reach *reach.SetupOptions
	// InPlace serves Cluster API's in-place update hooks; nil serves
	// none, and Cluster API replaces Machines for every change.
	InPlace *inplace.Options
	// HostAccess serves hosts' logs and facts through the aggregation
	// layer (kubectl fleet host logs|facts); nil, or no Gateway, serves
	// none.
	HostAccess *hostaccess.Options
}

// Hub is what Setup added to the manager, for callers that talk to it.
type Hub struct {
	// Gateway is nil without Options.Gateway.
	Gateway *gateway.Server
	// Proxy is nil unless edge reach runs.
	Proxy *reach.Proxy
	// HostAccess is nil unless the host-access API runs.
	HostAccess *hostaccess.Server
}

// Setup adds the hub to mgr: the reconcilers, the in-place hooks, the
// gateway with its readiness check, and edge reach. It is the one place a hub is put
// together; cmd/fleet-hub, the embedded hub and the tests all call it.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (*Hub, error) {
	if err := reconcilers.Setup(ctx, mgr, o.Reconcilers); err != nil {
		return nil, err
	}
	if o.InPlace != nil {
		if err := inplace.Setup(ctx, mgr, *o.InPlace); err != nil {
			return nil, err
		}
	}
	h := &Hub{}
	if o.Gateway == nil {
		return h, nil
	}
	var err error
	if h.Gateway, err = gateway.Setup(ctx, mgr, *o.Gateway); err != nil {
		return nil, err
	}
	gw := h.Gateway
	if err := mgr.AddReadyzCheck("gateway", func(*http.Request) error {
		select {
		case <-gw.Ready():
			return nil
		default:
			return fmt.Errorf("agent gateway is not listening yet")
		}
	}); err != nil {
		return nil, fmt.Errorf("adding gateway readiness check: %w", err)
	}
	if h.Proxy, err = setupReach(ctx, mgr, gw, o); err != nil {
		return nil, err
	}
	if o.HostAccess != nil {
		ha := *o.HostAccess
		if ha.ReplicaName == "" {
			ha.ReplicaName = o.Gateway.ReplicaName
		}
		if h.HostAccess, err = hostaccess.Setup(ctx, mgr, ha, gw); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// setupReach adds the edge-reach proxy and its kubeconfig reconciler, or
// only the reconciler that removes the proxy-url an earlier run wrote. Its
// controller runs as many workers as the hub's reconcilers.
func setupReach(ctx context.Context, mgr ctrl.Manager, gw *gateway.Server, o Options) (*reach.Proxy, error) {
	ctrlOpts := controller.Options{MaxConcurrentReconciles: max(o.Reconcilers.Concurrency, 1)}
	if o.Reconcilers.SkipNameValidation {
		skip := true
		ctrlOpts.SkipNameValidation = &skip
	}
	if o.Reach == nil || o.Reach.Addr == "0" {
		return nil, reach.SetupDisabled(mgr, ctrlOpts)
	}
	sOpts := *o.Reach
	sOpts.Controller = ctrlOpts
	if sOpts.ReplicaName == "" {
		sOpts.ReplicaName = o.Gateway.ReplicaName
	}
	return reach.Setup(ctx, mgr, gw, sOpts)
}
