package edgehost

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/finalizers"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/paused"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts;edgehosts/status;edgehosts/finalizers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgemachines,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch

// Reasons of the EdgeHost Ready condition.
const (
	// ReadyReason (Ready True): nothing is wrong with the host, whatever
	// its phase.
	ReadyReason = "Ready"
	// DeletionBlockedReason: the host is being deleted but still held or dirty.
	DeletionBlockedReason = "DeletionBlocked"
	// DuplicateRemovedReason: a deleted host was a copy of another that
	// holds the same claim; it went without touching the claim.
	DuplicateRemovedReason = "DuplicateRemoved"
	// ContactLostReason (AgentConnected Unknown): the host read as connected
	// but its hub replica stopped refreshing lastSeenTime.
	ContactLostReason = "ContactLost"
	// RemovedByForceReason: the Event on a host, and on the Machine it
	// served, that records what a forced removal gave up.
	RemovedByForceReason = "RemovedByForce"
	// ResetRetriedReason: the Event on a host whose failed reset an
	// operator ordered again.
	ResetRetriedReason = "ResetRetried"
)

// Reconciler reconciles EdgeHosts.
type Reconciler struct {
	Client client.Client
	// APIReader confirms, past the cache, that a claiming EdgeMachine is
	// really gone before its claim is freed.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// ContactTimeout marks a host AgentConnected=Unknown when it reads as
	// connected but its lastSeenTime, refreshed by the replica holding the
	// session every --last-seen-interval, is older than this: that replica
	// crashed, or stopped, and the agent has not come back. 0 turns it off.
	ContactTimeout time.Duration
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(_ context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.APIReader == nil || r.Recorder == nil {
		return fmt.Errorf("edgehost reconciler: Client, APIReader and Recorder must be set")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.EdgeHost{}).
		Named("edgehost").
		WithOptions(options).
		Complete(r)
}

// Reconcile brings one EdgeHost's phase and protection up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	host := &infrav1.EdgeHost{}
	if err := r.Client.Get(ctx, req.NamespacedName, host); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting EdgeHost: %w", err)
	}
	if inventory.MovingAway(host) {
		// clusterctl move drops the finalizer itself: the host, its claim
		// and its identity live on in the target hub cluster.
		return ctrl.Result{}, nil
	}

	if host.DeletionTimestamp.IsZero() {
		if added, err := finalizers.EnsureFinalizer(ctx, r.Client, host, infrav1.HostProtectionFinalizer); err != nil || added {
			return ctrl.Result{}, err
		}
	}
	// Hosts belong to no Cluster until claimed; only their own paused
	// annotation pauses them.
	if isPaused, requeue, err := paused.EnsurePausedCondition(ctx, r.Client, nil, host); err != nil || isPaused || requeue {
		return ctrl.Result{}, err
	}

	patchHelper, err := patch.NewHelper(host, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating patch helper: %w", err)
	}
	defer func() {
		if err := r.patch(ctx, host, patchHelper); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, err})
		}
	}()

	orphanWait, err := r.reconcileOrphanedClaim(ctx, host)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !host.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, host)
	}
	r.reconcileResetRetry(host)
	after := r.reconcileContact(host)
	if orphanWait > 0 && (after == 0 || orphanWait < after) {
		after = orphanWait
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// reconcileContact notices a host its hub replica has lost track of, and
// tells when to look again. A replica records a session's end only after a
// grace and not at all when it stops (its agents come back to another), so
// without this a host that died while its replica was down would read as
// connected for ever.
func (r *Reconciler) reconcileContact(host *infrav1.EdgeHost) time.Duration {
	if r.ContactTimeout <= 0 || !conditions.IsTrue(host, infrav1.AgentConnectedCondition) || host.Status.LastSeenTime == nil {
		return 0
	}
	if wait := time.Until(host.Status.LastSeenTime.Add(r.ContactTimeout)); wait > 0 {
		return wait + time.Second
	}
	msg := fmt.Sprintf("No word from hub replica %q since %s: it stopped or crashed, and the agent has not come back",
		host.Status.HubReplica, host.Status.LastSeenTime.UTC().Format(time.RFC3339))
	r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, ContactLostReason, "Contact", "%s", msg)
	conditions.Set(host, metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionUnknown,
		Reason: ContactLostReason, Message: msg})
	host.Status.HubReplica, host.Status.HubReplicaProxy = "", ""
	return 0
}

// OrphanGrace is how long a claim must have named a missing EdgeMachine
// before it is released: a restore from backup re-creates EdgeHosts before
// EdgeMachines (Velero restores kinds in alphabetical order), clusterctl
// move creates them in that order and deletes them in the other, and
// releasing meanwhile would reset every host they were meant to keep.
const OrphanGrace = 10 * time.Minute

// reconcileOrphanedClaim frees a claim whose EdgeMachine no longer exists
// (for example one whose finalizer was removed by hand), so the host can be
// reset and reused instead of staying claimed forever. It returns how long
// to wait before looking again while the grace runs.
func (r *Reconciler) reconcileOrphanedClaim(ctx context.Context, host *infrav1.EdgeHost) (time.Duration, error) {
	claim := host.Spec.ClaimRef
	if claim == nil {
		delete(host.Annotations, infrav1.ClaimOrphanedSinceAnnotation)
		return 0, nil
	}
	em := &infrav1.EdgeMachine{}
	key := client.ObjectKey{Namespace: host.Namespace, Name: claim.Name}
	if err := r.Client.Get(ctx, key, em); err == nil && holdsClaim(em, host) {
		// The common case, from the cache: every status change of a
		// claimed host comes here.
		delete(host.Annotations, infrav1.ClaimOrphanedSinceAnnotation)
		return 0, nil
	}
	// The cache may not have seen a claim made a moment ago: only the API
	// server can say the EdgeMachine is really gone.
	err := r.APIReader.Get(ctx, key, em)
	switch {
	case err == nil && holdsClaim(em, host):
		delete(host.Annotations, infrav1.ClaimOrphanedSinceAnnotation)
		return 0, nil
	case err != nil && !apierrors.IsNotFound(err):
		return 0, fmt.Errorf("checking claiming EdgeMachine %s: %w", claim.Name, err)
	}
	since, perr := time.Parse(time.RFC3339, host.Annotations[infrav1.ClaimOrphanedSinceAnnotation])
	if perr != nil {
		since = time.Now()
		if host.Annotations == nil {
			host.Annotations = map[string]string{}
		}
		host.Annotations[infrav1.ClaimOrphanedSinceAnnotation] = since.UTC().Format(time.RFC3339)
	}
	if wait := OrphanGrace - time.Since(since); wait > 0 {
		return wait + time.Second, nil
	}
	// The update below changes spec; the deferred status patch then applies
	// on top of the object the update returned.
	delete(host.Annotations, infrav1.ClaimOrphanedSinceAnnotation)
	if err := inventory.Release(ctx, r.Client, host, claim.UID); err != nil {
		return 0, err
	}
	r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, "OrphanedClaimReleased", "Release",
		"EdgeMachine %s (claim %s) has been missing since %s; released the host for reset", claim.Name, claim.UID, since.UTC().Format(time.RFC3339))
	return 0, nil
}

// holdsClaim tells whether em is the machine host's claim is for: by claim
// ID, or, for a machine restored from a backup before it recorded one (a new
// uid), by its node's providerID naming this host (its reconciler adopts the
// claim).
func holdsClaim(em *infrav1.EdgeMachine, host *infrav1.EdgeHost) bool {
	return inventory.ClaimID(em) == host.Spec.ClaimRef.UID ||
		em.Annotations[infrav1.ClaimIDAnnotation] == "" && em.Spec.ProviderID == inventory.ProviderID(host)
}

// reconcileResetRetry orders a failed reset again when an operator raised
// the retry counter: copying it into spec makes a new generation, which
// the agent takes as a new order (it never retries on its own).
func (r *Reconciler) reconcileResetRetry(host *infrav1.EdgeHost) {
	n, err := strconv.ParseInt(host.Annotations[infrav1.RetryResetAnnotation], 10, 64)
	if err != nil || n <= host.Spec.ResetRetries {
		return
	}
	host.Spec.ResetRetries = n
	r.Recorder.Eventf(host, nil, corev1.EventTypeNormal, ResetRetriedReason, "RetryReset",
		"Reset ordered again (retry %d) in phase %s", n, hostphase.Phase(host))
}

// reconcileDelete lets a host go once no Machine holds it. Deleting a host
// revokes its identity at once (the gateway refuses it from then on), so
// no reset can be reported any more: a host that was not clean is let go
// unreset, and says so. A removal forced by the operator also gives up the
// claim of the Machine the host serves.
func (r *Reconciler) reconcileDelete(ctx context.Context, host *infrav1.EdgeHost) error {
	forced := host.Annotations[infrav1.RemoveAnnotation] == infrav1.RemoveForce
	by := host.Annotations[infrav1.RemovedByAnnotation]
	if by == "" {
		by = "an unnamed user"
	}
	gaveUp := false
	if forced && host.Spec.ClaimRef != nil {
		if err := r.giveUpClaim(ctx, host, by); err != nil {
			return err
		}
		gaveUp = true
	}
	if host.Spec.ClaimRef == nil {
		switch {
		case gaveUp: // giveUpClaim said what was given up
		case forced && !hostphase.IsReleased(host):
			r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, RemovedByForceReason, "Delete",
				"EdgeHost removed by force by %s in phase %s: its identity was revoked and the host was not reset", by, hostphase.Phase(host))
		case !hostphase.IsReleased(host):
			r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, "DeletedUnreset", "Delete",
				"EdgeHost deleted in phase %s: its identity was revoked and the host was not reset", hostphase.Phase(host))
		}
		controllerutil.RemoveFinalizer(host, infrav1.HostProtectionFinalizer)
		return nil
	}
	other, err := r.otherHolder(ctx, host)
	if err != nil {
		return err
	}
	if other != "" {
		// A copy (an EdgeHost restored twice): the claim stays with the
		// other, which the machine keeps; nothing is released or reset.
		r.Recorder.Eventf(host, nil, corev1.EventTypeNormal, DuplicateRemovedReason, "Delete",
			"EdgeHost deleted while EdgeHost %s holds the same claim of EdgeMachine %s: it goes, the claim stays with %s, nothing was reset", other, host.Spec.ClaimRef.Name, other)
		controllerutil.RemoveFinalizer(host, infrav1.HostProtectionFinalizer)
		return nil
	}
	msg := fmt.Sprintf("Deletion waits until EdgeMachine %s releases the host (delete its Machine, or give it up with `kubectl fleet host remove --force`); the host's identity is already revoked", host.Spec.ClaimRef.Name)
	if !conditions.IsFalse(host, infrav1.ReadyCondition) || conditions.GetReason(host, infrav1.ReadyCondition) != DeletionBlockedReason {
		r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, DeletionBlockedReason, "Delete", "%s", msg)
	}
	conditions.Set(host, metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionFalse,
		Reason: DeletionBlockedReason, Message: msg})
	return nil
}

// otherHolder is the name of another EdgeHost, not being deleted, that
// holds host's claim ("" for none).
func (r *Reconciler) otherHolder(ctx context.Context, host *infrav1.EdgeHost) (string, error) {
	list := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, list, client.InNamespace(host.Namespace)); err != nil {
		return "", fmt.Errorf("listing EdgeHosts: %w", err)
	}
	for _, h := range list.Items {
		if h.Name != host.Name && h.DeletionTimestamp.IsZero() && h.Spec.ClaimRef != nil && h.Spec.ClaimRef.UID == host.Spec.ClaimRef.UID {
			return h.Name, nil
		}
	}
	return "", nil
}

// giveUpClaim frees the host from the Machine it serves, for a forced
// removal, and tells that Machine (and its EdgeMachine) it lost its host.
func (r *Reconciler) giveUpClaim(ctx context.Context, host *infrav1.EdgeHost, by string) error {
	claim := *host.Spec.ClaimRef
	em := &infrav1.EdgeMachine{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: host.Namespace, Name: claim.Name}, em)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && inventory.ClaimID(em) != claim.UID):
		em = nil
	case err != nil:
		return fmt.Errorf("reading claiming EdgeMachine %s: %w", claim.Name, err)
	}
	// The update below changes spec; the deferred status patch then applies
	// on top of the object the update returned.
	if err := inventory.Release(ctx, r.Client, host, claim.UID); err != nil {
		return err
	}
	msg := fmt.Sprintf("EdgeHost %s removed by force by %s: EdgeMachine %s lost its host, which was not reset", host.Name, by, claim.Name)
	if em != nil {
		if m, err := util.GetOwnerMachine(ctx, r.Client, em.ObjectMeta); err == nil && m != nil {
			msg = fmt.Sprintf("EdgeHost %s removed by force by %s: Machine %s lost its host, which was not reset", host.Name, by, m.Name)
			r.Recorder.Eventf(m, host, corev1.EventTypeWarning, RemovedByForceReason, "Delete", "%s", msg)
		}
		r.Recorder.Eventf(em, host, corev1.EventTypeWarning, RemovedByForceReason, "Delete", "%s", msg)
	}
	r.Recorder.Eventf(host, nil, corev1.EventTypeWarning, RemovedByForceReason, "Delete", "%s", msg)
	return nil
}

func (r *Reconciler) patch(ctx context.Context, host *infrav1.EdgeHost, h *patch.Helper) error {
	phase := hostphase.Phase(host)
	if host.Status.Phase != phase && host.Status.Phase != "" {
		eventType := corev1.EventTypeNormal
		if phase == infrav1.HostNeedsAttention {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(host, nil, eventType, string(phase), "Phase", "Host phase changed from %s to %s", host.Status.Phase, phase)
	}
	host.Status.Phase = phase
	if host.DeletionTimestamp.IsZero() {
		// The reason does not repeat the phase (status.phase has it): a
		// condition that changes is a second status patch, and a host
		// passes three phases per claim.
		cond := metav1.Condition{Type: infrav1.ReadyCondition, Status: metav1.ConditionTrue, Reason: ReadyReason}
		if phase == infrav1.HostNeedsAttention {
			cond.Status, cond.Reason = metav1.ConditionFalse, string(phase)
			if p := host.Status.Provisioning; p != nil {
				cond.Message = fmt.Sprintf("Agent reported %s at %q: %s", p.State, p.Step, p.Message)
			}
			if p := host.Status.Provisioning; hostphase.HoldsUnknownWorkload(host) {
				cond.Reason = "UnknownWorkload"
				cond.Message = fmt.Sprintf("The agent runs the workload of claim %s, which no EdgeMachine holds and this hub never released "+
					"(restored from an older backup?): it is not reset without an order; to reset it, record its release: "+
					"kubectl annotate edgehost %s %s=%s", p.ClaimUID, host.Name, infrav1.ReleasedClaimAnnotation, p.ClaimUID)
			}
		}
		conditions.Set(host, cond)
	}
	return h.Patch(ctx, host,
		patch.WithOwnedConditions{Conditions: []string{infrav1.ReadyCondition, infrav1.PausedCondition}},
	)
}
