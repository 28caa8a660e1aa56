package edgemachine

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
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
	"sigs.k8s.io/controller-runtime/pkg/handler"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgemachines;edgemachines/status;edgemachines/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines;clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles EdgeMachines.
type Reconciler struct {
	Client client.Client
	// APIReader reads what must not be cached: bootstrap Secrets (the hub
	// has no business keeping every Secret in memory) and the live host list
	// when a claim must not be based on a stale cache.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// WatchFilterValue, when set, limits the reconciler to objects labelled
	// cluster.x-k8s.io/watch-filter with that value.
	WatchFilterValue string
}

// scope is everything one reconcile works on.
type scope struct {
	edgeMachine *infrav1.EdgeMachine
	machine     *clusterv1.Machine
	cluster     *clusterv1.Cluster
	host        *infrav1.EdgeHost
}

// SetupWithManager registers the reconciler, its index and its watches.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Recorder == nil {
		return fmt.Errorf("edgemachine reconciler: Client, APIReader and Recorder must be set")
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &infrav1.EdgeHost{}, inventory.ClaimUIDIndex, inventory.IndexClaimUID); err != nil {
		return fmt.Errorf("indexing EdgeHosts by claim: %w", err)
	}
	log := ctrl.LoggerFrom(ctx)
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.EdgeMachine{}).
		Named("edgemachine").
		WithOptions(options).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), log, r.WatchFilterValue)).
		Watches(&clusterv1.Machine{},
			handler.EnqueueRequestsFromMapFunc(util.MachineToInfrastructureMapFunc(infrav1.GroupVersion.WithKind("EdgeMachine")))).
		Watches(&clusterv1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(r.clusterToEdgeMachines),
			builder.WithPredicates(predicates.ClusterPausedTransitionsOrInfrastructureProvisioned(mgr.GetScheme(), log))).
		Watches(&infrav1.EdgeHost{},
			handler.EnqueueRequestsFromMapFunc(r.hostToEdgeMachines),
			builder.WithPredicates(hostChangeMattersToMachines())).
		Complete(r)
}

// Reconcile moves one EdgeMachine one step towards a provisioned host.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	log := ctrl.LoggerFrom(ctx)

	em := &infrav1.EdgeMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, em); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting EdgeMachine: %w", err)
	}
	if inventory.MovingAway(em) {
		// Not a deletion to act on: clusterctl move drops the finalizer,
		// and the claim lives on in the target hub cluster's copy.
		return ctrl.Result{}, nil
	}

	machine, err := util.GetOwnerMachine(ctx, r.Client, em.ObjectMeta)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("getting owner Machine: %w", err)
	}
	if machine == nil {
		if !em.DeletionTimestamp.IsZero() {
			// Orphaned and going away: give the host back and let go.
			return ctrl.Result{}, r.releaseAndLetGo(ctx, em)
		}
		log.Info("Waiting for Machine controller to set OwnerRef on EdgeMachine")
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Machine", klog.KObj(machine))
	ctx = ctrl.LoggerInto(ctx, log)

	cluster, err := util.GetClusterFromMetadata(ctx, r.Client, machine.ObjectMeta)
	if err != nil && !em.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.releaseAndLetGo(ctx, em)
	}
	if err != nil {
		log.Info("Waiting for the Machine's Cluster", "reason", err.Error())
		return ctrl.Result{}, nil
	}
	log = log.WithValues("Cluster", klog.KObj(cluster))
	ctx = ctrl.LoggerInto(ctx, log)

	if em.DeletionTimestamp.IsZero() {
		// Added only once the Machine owns us, as CAPD does, so core's
		// server-side apply of labels never fights over the finalizer.
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, em, infrav1.EdgeMachineFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}

	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, cluster, em); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(em, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating patch helper: %w", err)
	}
	s := &scope{edgeMachine: em, machine: machine, cluster: cluster}
	defer func() {
		if err := r.patch(ctx, s, patchHelper); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	if !em.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// phaseFunc is one step of a reconcile. A step that returns stop=true has
// nothing more to do until something changes; the following steps are skipped.
type phaseFunc func(ctx context.Context, s *scope) (stop bool, err error)

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	phases := []phaseFunc{
		r.reconcileBootstrapData,
		r.reconcileHostClaim,
		r.reconcileHostAgent,
		r.reconcileHostStatus,
		r.reconcileCertificateExpiry,
		r.reconcileCertificatesRenewal,
		r.reconcileKubernetesVersion,
	}
	for _, phase := range phases {
		stop, err := phase(ctx, s)
		if err != nil || stop {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	s.edgeMachine.Status.Phase = infrav1.MachineDeleting
	host, err := r.releaseHeld(ctx, s.edgeMachine)
	if err != nil {
		return ctrl.Result{}, err
	}
	if host != nil {
		r.Recorder.Eventf(s.edgeMachine, host, "Normal", "HostReleased", "Release",
			"Released EdgeHost %s; it returns to the pool once its agent has reset it", host.Name)
	}
	controllerutil.RemoveFinalizer(s.edgeMachine, infrav1.EdgeMachineFinalizer)
	return ctrl.Result{}, nil
}

// releaseAndLetGo handles a deleting EdgeMachine that has no Machine or
// Cluster left to consult.
func (r *Reconciler) releaseAndLetGo(ctx context.Context, em *infrav1.EdgeMachine) error {
	if !controllerutil.ContainsFinalizer(em, infrav1.EdgeMachineFinalizer) {
		return nil
	}
	if _, err := r.releaseHeld(ctx, em); err != nil {
		return err
	}
	patchHelper, err := patch.NewHelper(em, r.Client)
	if err != nil {
		return fmt.Errorf("creating patch helper: %w", err)
	}
	controllerutil.RemoveFinalizer(em, infrav1.EdgeMachineFinalizer)
	return patchHelper.Patch(ctx, em)
}

// patch summarises the conditions into Ready and writes everything back.
func (r *Reconciler) patch(ctx context.Context, s *scope, h *patch.Helper) error {
	em := s.edgeMachine
	em.Status.Phase = machinePhase(em)
	if err := conditions.SetSummaryCondition(em, em, infrav1.ReadyCondition,
		conditions.ForConditionTypes{
			infrav1.BootstrapDataReadyCondition,
			infrav1.HostClaimedCondition,
			infrav1.HostProvisionedCondition,
			infrav1.HostAgentConnectedCondition,
		},
		// Only a machine that holds a host has an agent to report on.
		conditions.IgnoreTypesIfMissing{infrav1.HostAgentConnectedCondition},
	); err != nil {
		return fmt.Errorf("summarising Ready: %w", err)
	}
	return h.Patch(ctx, em,
		patch.WithOwnedConditions{Conditions: []string{
			infrav1.ReadyCondition,
			infrav1.PausedCondition,
			infrav1.BootstrapDataReadyCondition,
			infrav1.HostClaimedCondition,
			infrav1.HostProvisionedCondition,
			infrav1.HostAgentConnectedCondition,
			infrav1.KubernetesVersionCondition,
		}},
		patch.WithStatusObservedGeneration{},
	)
}

func machinePhase(em *infrav1.EdgeMachine) infrav1.EdgeMachinePhase {
	switch {
	case !em.DeletionTimestamp.IsZero():
		return infrav1.MachineDeleting
	case conditions.GetReason(em, infrav1.HostProvisionedCondition) == infrav1.ProvisioningFailedReason:
		return infrav1.MachineFailed
	case conditions.IsTrue(em, infrav1.HostProvisionedCondition):
		return infrav1.MachineProvisioned
	case conditions.IsTrue(em, infrav1.HostClaimedCondition):
		return infrav1.MachineProvisioning
	case conditions.IsTrue(em, infrav1.BootstrapDataReadyCondition):
		return infrav1.MachineWaitingForHost
	default:
		return infrav1.MachinePending
	}
}
