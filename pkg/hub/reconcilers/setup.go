package reconcilers

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/edgefleet/fleet/pkg/hub/eventnote"
	"github.com/edgefleet/fleet/pkg/hub/fleetmetrics"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/agentrollout"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgecluster"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgehost"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/edgemachine"
	"github.com/edgefleet/fleet/pkg/hub/reconcilers/kubernetesrelease"
)

// Options tune the hub's reconcilers.
type Options struct {
	// Concurrency is the number of workers per reconciler.
	Concurrency int
	// WatchFilterValue limits the Cluster API facing reconcilers to objects
	// with a matching cluster.x-k8s.io/watch-filter label.
	WatchFilterValue string
	// SkipNameValidation lets a second manager in the same process register
	// controllers of the same name (tests that run several hubs).
	SkipNameValidation bool
	// ContactTimeout: a host reading as connected whose lastSeenTime is
	// older than this is marked AgentConnected=Unknown (fleet-hub uses
	// twice --last-seen-interval plus a minute); 0 turns it off.
	ContactTimeout time.Duration
}

// MaxRetryDelay caps the back-off of an object whose reconcile keeps
// failing. controller-runtime's default cap is 16 minutes: after an API
// server overload of a few dozen seconds, a host deletion or a claim could
// then wait a quarter of an hour although nothing is wrong any more.
const MaxRetryDelay = time.Minute

// RateLimiter is the hub reconcilers' work-queue rate limiter: the
// default's per-item exponential back-off (from 5 ms), capped at
// MaxRetryDelay, and its overall 10 qps / 100 burst bucket.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Setup registers all hub reconcilers with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	copts := controller.Options{MaxConcurrentReconciles: max(opts.Concurrency, 1), RateLimiter: RateLimiter()}
	if opts.SkipNameValidation {
		skip := true
		copts.SkipNameValidation = &skip
	}
	if err := (&edgemachine.Reconciler{
		Client:           mgr.GetClient(),
		APIReader:        mgr.GetAPIReader(),
		Recorder:         eventnote.Recorder(mgr.GetEventRecorder("edgemachine-controller")),
		WatchFilterValue: opts.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up EdgeMachine reconciler: %w", err)
	}
	if err := (&edgecluster.Reconciler{
		Client:           mgr.GetClient(),
		Recorder:         eventnote.Recorder(mgr.GetEventRecorder("edgecluster-controller")),
		WatchFilterValue: opts.WatchFilterValue,
	}).SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up EdgeCluster reconciler: %w", err)
	}
	if err := (&edgehost.Reconciler{
		Client:         mgr.GetClient(),
		APIReader:      mgr.GetAPIReader(),
		Recorder:       eventnote.Recorder(mgr.GetEventRecorder("edgehost-controller")),
		ContactTimeout: opts.ContactTimeout,
	}).SetupWithManager(ctx, mgr, copts); err != nil {
		return fmt.Errorf("setting up EdgeHost reconciler: %w", err)
	}
	if err := (&kubernetesrelease.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("setting up EdgeKubernetesRelease reconciler: %w", err)
	}
	if err := (&agentrollout.Reconciler{Client: mgr.GetClient(),
		Recorder: eventnote.Recorder(mgr.GetEventRecorder("edgeagentrollout-controller"))}).SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("setting up EdgeAgentRollout reconciler: %w", err)
	}
	// From the cache the reconcilers fill anyway: a scrape costs no API call.
	return fleetmetrics.Register(mgr.GetCache())
}
