package edgemachine

import (
	"context"
	"maps"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// clusterToEdgeMachines wakes every EdgeMachine of a Cluster, for pause and
// infrastructure transitions.
func (r *Reconciler) clusterToEdgeMachines(ctx context.Context, o client.Object) []reconcile.Request {
	c, ok := o.(*clusterv1.Cluster)
	if !ok {
		return nil
	}
	list := &infrav1.EdgeMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(c.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: c.Name}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing EdgeMachines of Cluster")
		return nil
	}
	return requests(list.Items, func(*infrav1.EdgeMachine) bool { return true })
}

// hostToEdgeMachines wakes the machine that holds a host, or, for a host
// nobody holds, the machines still waiting for one: a host becoming
// Available is what they wait on.
func (r *Reconciler) hostToEdgeMachines(ctx context.Context, o client.Object) []reconcile.Request {
	h, ok := o.(*infrav1.EdgeHost)
	if !ok {
		return nil
	}
	if h.Spec.ClaimRef != nil {
		// Woken by name: a machine re-created under it reconciles once
		// for nothing, which is cheaper than listing every machine on
		// each of the host's status writes.
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: h.Namespace, Name: h.Spec.ClaimRef.Name}}}
	}
	// Read-only, so not deep-copied: at a fleet's cold start this runs for
	// every host's connectivity write.
	list := &infrav1.EdgeMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(h.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing EdgeMachines for EdgeHost")
		return nil
	}
	return requests(list.Items, func(em *infrav1.EdgeMachine) bool {
		return em.DeletionTimestamp.IsZero() && !conditions.IsTrue(em, infrav1.HostClaimedCondition)
	})
}

// hostChangeMattersToMachines passes the host updates a machine can act
// on: any change of a host some machine holds (the holder follows its
// host's provisioning), and, for a host nobody holds, a change of whether
// it can be claimed or of its labels (selectors, zones: what a waiting
// machine counts in its message). The rest — an unclaimed host's
// connectivity and lastSeenTime, its facts and link reports — would wake
// every waiting machine to list every host for nothing: an event per host
// at a fleet's cold start, and one per lastSeenTime refresh of an idle one.
func hostChangeMattersToMachines() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*infrav1.EdgeHost)
		cur, okNew := e.ObjectNew.(*infrav1.EdgeHost)
		if !okOld || !okNew {
			return true
		}
		if old.Spec.ClaimRef != nil || cur.Spec.ClaimRef != nil {
			return true
		}
		return hostphase.IsClaimable(old) != hostphase.IsClaimable(cur) || !maps.Equal(old.Labels, cur.Labels)
	}}
}

func requests(items []infrav1.EdgeMachine, keep func(*infrav1.EdgeMachine) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range items {
		if keep(&items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&items[i])})
		}
	}
	return out
}
