package edgecluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeclusters;edgeclusters/status;edgeclusters/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch

// Reconciler reconciles EdgeClusters.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// WatchFilterValue, when set, limits the reconciler to objects labelled
	// cluster.x-k8s.io/watch-filter with that value.
	WatchFilterValue string
}

type scope struct {
	edgeCluster *infrav1.EdgeCluster
	cluster     *clusterv1.Cluster
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.Recorder == nil {
		return fmt.Errorf("edgecluster reconciler: Client and Recorder must be set")
	}
	log := ctrl.LoggerFrom(ctx)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.EdgeCluster{}).
		Named("edgecluster").
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		WithEventFilter(predicates.ResourceIsNotExternallyManaged(mgr.GetScheme(), log)).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(util.ClusterToInfrastructureMapFunc(ctx,
				infrav1.GroupVersion.WithKind("EdgeCluster"), mgr.GetClient(), &infrav1.EdgeCluster{})),
			builder.WithPredicates(predicates.ClusterPausedTransitions(mgr.GetScheme(), log))).
		Watches(&infrav1.EdgeHost{}, r.hostEvents()).
		Complete(r)
}

// Reconcile brings one EdgeCluster up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)
	ec := &infrav1.EdgeCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, ec); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting EdgeCluster: %w", err)
	}

	cluster, err := util.GetOwnerCluster(ctx, r.Client, ec.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting owner Cluster: %w", err)
	}
	if cluster == nil {
		if !ec.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, r.letGo(ctx, ec)
		}
		log.Info("Waiting for Cluster controller to set OwnerRef on EdgeCluster")
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, log.WithValues("Cluster", klog.KObj(cluster)))

	if ec.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, ec, infrav1.EdgeClusterFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, ec); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(ec, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating patch helper: %w", err)
	}
	s := &scope{edgeCluster: ec, cluster: cluster}
	defer func() {
		if err := r.patch(ctx, s, patchHelper); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !ec.DeletionTimestamp.IsZero() {
		// Nothing outside the API is held per cluster yet; the finalizer is
		// the hook where edge reach tears its tunnels down.
		controllerutil.RemoveFinalizer(ec, infrav1.EdgeClusterFinalizer)
		return ctrl.Result{}, nil
	}
	if err := r.reconcileFailureDomains(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	r.reconcileEndpoint(s)
	return ctrl.Result{}, nil
}

// reconcileEndpoint settles where the control plane is reached. The
// infrastructure counts as provisioned only once it is known.
func (r *Reconciler) reconcileEndpoint(s *scope) {
	ec := s.edgeCluster
	var cond metav1.Condition
	switch {
	case ec.Spec.ControlPlaneEndpoint.IsValid():
		cond = metav1.Condition{Status: metav1.ConditionTrue, Reason: infrav1.ControlPlaneEndpointSetReason,
			Message: fmt.Sprintf("Control plane endpoint is %s:%d", ec.Spec.ControlPlaneEndpoint.Host, ec.Spec.ControlPlaneEndpoint.Port)}
	case s.cluster.Spec.ControlPlaneEndpoint.IsValid():
		cond = metav1.Condition{Status: metav1.ConditionTrue, Reason: infrav1.ControlPlaneEndpointSetReason,
			Message: fmt.Sprintf("Control plane endpoint %s:%d is provided on the Cluster",
				s.cluster.Spec.ControlPlaneEndpoint.Host, s.cluster.Spec.ControlPlaneEndpoint.Port)}
	default:
		cond = metav1.Condition{Status: metav1.ConditionFalse, Reason: infrav1.ControlPlaneEndpointMissingReason,
			Message: "Neither EdgeCluster spec.controlPlaneEndpoint nor Cluster spec.controlPlaneEndpoint has a host and port; set one"}
	}
	cond.Type = infrav1.ControlPlaneEndpointReadyCondition
	// Get returns a pointer into the slice that Set rewrites: compare first.
	changed := true
	if old := conditions.Get(ec, cond.Type); old != nil {
		changed = old.Status != cond.Status || old.Reason != cond.Reason
	}
	conditions.Set(ec, cond)
	if changed {
		eventType := corev1.EventTypeNormal
		if cond.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(ec, s.cluster, eventType, cond.Reason, cond.Type, "%s", cond.Message)
	}
	if cond.Status == metav1.ConditionTrue {
		provisioned := true
		ec.Status.Initialization.Provisioned = &provisioned
	}
}

// reconcileFailureDomains publishes one failure domain per zone among the
// hosts this cluster may use. An invalid selector leaves them unchanged.
func (r *Reconciler) reconcileFailureDomains(ctx context.Context, s *scope) error {
	ec := s.edgeCluster
	selector := labels.Everything()
	if ec.Spec.HostSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(ec.Spec.HostSelector)
		if err != nil {
			r.Recorder.Eventf(ec, nil, corev1.EventTypeWarning, "InvalidHostSelector", "FailureDomains",
				"spec.hostSelector is invalid: %v", err)
			return nil
		}
		selector = sel
	}
	hosts := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(ec.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return fmt.Errorf("listing EdgeHosts: %w", err)
	}
	zones := map[string]bool{}
	for i := range hosts.Items {
		if z := inventory.Zone(&hosts.Items[i]); z != "" {
			zones[z] = true
		}
	}
	var domains []infrav1.FailureDomain
	for z := range zones {
		cp := true
		domains = append(domains, infrav1.FailureDomain{Name: z, ControlPlane: &cp})
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i].Name < domains[j].Name })
	ec.Status.FailureDomains = domains
	return nil
}

func (r *Reconciler) patch(ctx context.Context, s *scope, h *patch.Helper) error {
	ec := s.edgeCluster
	if err := conditions.SetSummaryCondition(ec, ec, infrav1.ReadyCondition,
		conditions.ForConditionTypes{infrav1.ControlPlaneEndpointReadyCondition}); err != nil {
		return fmt.Errorf("summarising Ready: %w", err)
	}
	return h.Patch(ctx, ec,
		patch.WithOwnedConditions{Conditions: []string{
			infrav1.ReadyCondition, infrav1.PausedCondition, infrav1.ControlPlaneEndpointReadyCondition,
		}},
		patch.WithStatusObservedGeneration{},
	)
}

func (r *Reconciler) letGo(ctx context.Context, ec *infrav1.EdgeCluster) error {
	if !controllerutil.ContainsFinalizer(ec, infrav1.EdgeClusterFinalizer) {
		return nil
	}
	h, err := patch.NewHelper(ec, r.Client)
	if err != nil {
		return fmt.Errorf("creating patch helper: %w", err)
	}
	controllerutil.RemoveFinalizer(ec, infrav1.EdgeClusterFinalizer)
	return h.Patch(ctx, ec)
}

// hostEvents wakes the EdgeClusters whose failure domains a host's event
// may change: a host appearing, going or relabelled, for the clusters
// whose selector it matched before or matches now. A host's status, which
// its agent refreshes all the time, never changes a failure domain, and
// every cluster of a namespace woken by every host event is N² work for a
// namespace of one-host sites.
func (r *Reconciler) hostEvents() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], hosts ...client.Object) {
		for _, req := range r.edgeClustersSelecting(ctx, hosts...) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) {
				return
			}
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// edgeClustersSelecting are the EdgeClusters of the hosts' namespace whose
// host selector matches any of them (no selector matches every host; an
// invalid one none).
func (r *Reconciler) edgeClustersSelecting(ctx context.Context, hosts ...client.Object) []reconcile.Request {
	if len(hosts) == 0 {
		return nil
	}
	list := &infrav1.EdgeClusterList{}
	if err := r.Client.List(ctx, list, client.InNamespace(hosts[0].GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing EdgeClusters for EdgeHost")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		ec := &list.Items[i]
		selector := labels.Everything()
		if ec.Spec.HostSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(ec.Spec.HostSelector)
			if err != nil {
				continue
			}
			selector = sel
		}
		if slices.ContainsFunc(hosts, func(h client.Object) bool { return selector.Matches(labels.Set(h.GetLabels())) }) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ec)})
		}
	}
	return out
}
