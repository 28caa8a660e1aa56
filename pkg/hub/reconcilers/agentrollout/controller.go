package agentrollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util/patch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// resync is how often a roll-out under way is looked at without news.
const resync = 30 * time.Second

// Reconciler runs EdgeAgentRollouts.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// SetupWithManager registers the reconciler and its watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.Recorder == nil {
		return fmt.Errorf("agentrollout reconciler: Client and Recorder must be set")
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.EdgeAgentRollout{}).
		Named("edgeagentrollout").
		WithOptions(options).
		Watches(&infrav1.EdgeHost{}, handler.EnqueueRequestsFromMapFunc(r.namespaceRollouts),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: rolloutRelevant})).
		Watches(&infrav1.EdgeAgentRelease{}, handler.EnqueueRequestsFromMapFunc(r.namespaceRollouts)).
		Complete(r)
}

// rolloutRelevant passes host updates that can move a roll-out: not the
// lastSeenTime and link writes that make most of them.
func rolloutRelevant(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*infrav1.EdgeHost)
	n, ok2 := e.ObjectNew.(*infrav1.EdgeHost)
	if !ok1 || !ok2 {
		return true
	}
	return o.Status.Facts.AgentVersion != n.Status.Facts.AgentVersion ||
		!equality.Semantic.DeepEqual(o.Status.AgentRelease, n.Status.AgentRelease) ||
		!equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
		o.Annotations[infrav1.AgentReleaseAnnotation] != n.Annotations[infrav1.AgentReleaseAnnotation] ||
		meta.IsStatusConditionTrue(o.Status.Conditions, infrav1.AgentConnectedCondition) !=
			meta.IsStatusConditionTrue(n.Status.Conditions, infrav1.AgentConnectedCondition) ||
		!n.DeletionTimestamp.IsZero()
}

// namespaceRollouts are the roll-outs of obj's namespace not yet ended.
func (r *Reconciler) namespaceRollouts(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &infrav1.EdgeAgentRolloutList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if !ended(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// ended: nothing will move any more (a failed roll-out being aborted
// still moves hosts back).
func ended(ro *infrav1.EdgeAgentRollout) bool {
	switch ro.Status.Phase {
	case infrav1.AgentRolloutFailed, infrav1.AgentRolloutComplete:
		return !ro.Spec.Abort
	case infrav1.AgentRolloutAborted:
		return true
	}
	return false
}

// Reconcile moves one roll-out a step.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	ro := &infrav1.EdgeAgentRollout{}
	if err := r.Client.Get(ctx, req.NamespacedName, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("getting EdgeAgentRollout: %w", err)
	}
	if !ro.DeletionTimestamp.IsZero() {
		// The orders given stay: hosts keep the release they were moved to.
		return ctrl.Result{}, nil
	}
	helper, err := patch.NewHelper(ro, r.Client)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("creating patch helper: %w", err)
	}
	defer func() {
		if err := helper.Patch(ctx, ro, patch.WithOwnedConditions{Conditions: []string{ProgressingCondition, CompleteCondition}}); err != nil {
			reterr = kerrors.NewAggregate([]error{reterr, fmt.Errorf("patching EdgeAgentRollout %s: %w", ro.Name, err)})
		}
	}()
	w, err := r.world(ctx, ro)
	if err != nil {
		return ctrl.Result{}, err
	}
	writes, evs := step(ro, w)
	for _, wr := range writes {
		if err := r.order(ctx, wr); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.awaitCache(ctx, writes)
	for _, e := range evs {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(ro, nil, typ, e.reason, e.action, "%s", e.message)
	}
	if ended(ro) {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: resync}, nil
}

// world reads what a step sees, from the cache.
func (r *Reconciler) world(ctx context.Context, ro *infrav1.EdgeAgentRollout) (world, error) {
	w := world{now: r.Now(), active: map[string]bool{}}
	hosts := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(ro.Namespace)); err != nil {
		return w, fmt.Errorf("listing EdgeHosts: %w", err)
	}
	w.hosts = hosts.Items
	releases := &infrav1.EdgeAgentReleaseList{}
	if err := r.Client.List(ctx, releases, client.InNamespace(ro.Namespace)); err != nil {
		return w, fmt.Errorf("listing EdgeAgentReleases: %w", err)
	}
	for _, rel := range releases.Items {
		w.release = w.release || rel.Spec.Version == ro.Spec.Version
	}
	rollouts := &infrav1.EdgeAgentRolloutList{}
	if err := r.Client.List(ctx, rollouts, client.InNamespace(ro.Namespace)); err != nil {
		return w, fmt.Errorf("listing EdgeAgentRollouts: %w", err)
	}
	for i := range rollouts.Items {
		o := &rollouts.Items[i]
		if o.Name != ro.Name && !ended(o) {
			w.active[o.Name] = true
		}
	}
	return w, nil
}

// awaitCache waits (briefly) until the cache shows the orders written: the
// next reconcile, which this one's status update starts, must count these
// hosts as ordered, or it orders others in their place.
func (r *Reconciler) awaitCache(ctx context.Context, writes []write) {
	deadline := time.Now().Add(5 * time.Second)
	for _, wr := range writes {
		want, _ := json.Marshal(wr.order)
		for time.Now().Before(deadline) {
			h := &infrav1.EdgeHost{}
			if err := r.Client.Get(ctx, client.ObjectKeyFromObject(wr.host), h); err != nil || h.Annotations[infrav1.AgentReleaseAnnotation] == string(want) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// order puts an order on a host; the annotation is this reconciler's
// alone, so a merge patch without a resourceVersion does.
func (r *Reconciler) order(ctx context.Context, wr write) error {
	raw, err := json.Marshal(wr.order)
	if err != nil {
		return err
	}
	h := wr.host.DeepCopy()
	orig := h.DeepCopy()
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[infrav1.AgentReleaseAnnotation] = string(raw)
	if err := r.Client.Patch(ctx, h, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("ordering EdgeHost %s to run fleet-agent %s: %w", h.Name, wr.order.Version, err)
	}
	return nil
}
