package reach

import (
	"context"
	"net"
	"slices"
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// Resolver says how each host reaches its cluster's endpoint at its site
// (the Reach of its desired state), from the informer cache alone, and
// tells the hosts' sessions when that changes.
type Resolver struct {
	client client.Client
	// kick asks a host's session, if this replica holds one, to
	// recompute its desired state.
	kick func(namespace, name string, seen time.Time)
}

// NewResolver returns a Resolver reading c; kick is how it tells a host's
// session that its Reach may have changed.
func NewResolver(c client.Client, kick func(namespace, name string, seen time.Time)) *Resolver {
	return &Resolver{client: c, kick: kick}
}

// For computes how h's cluster endpoint is reached at its site, from
// the informer cache alone: the endpoint of the Cluster its machine
// belongs to, resolved to the cluster's provisioned control-plane hosts.
// A control-plane host resolves it to itself (127.0.0.1) first once its
// own API server runs — or while it is the first control-plane host, whose
// kubeadm init needs the name before anything else exists — and to the
// other control-plane hosts while it joins. Tunnels says whether edge
// reach is on for the cluster. nil when h belongs to no cluster or the
// cluster has no endpoint yet.
func (s *Resolver) For(ctx context.Context, h *infrav1.EdgeHost) *wire.Reach {
	name := h.Labels[infrav1.ClusterLabel]
	if name == "" || !s.claimedFor(ctx, h, name) {
		return nil
	}
	cluster := &clusterv1.Cluster{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name}, cluster); err != nil {
		return nil
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return nil
	}
	r := &wire.Reach{Endpoint: net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))),
		Tunnels: cluster.Annotations[infrav1.EdgeReachAnnotation] != "disabled"}
	cps := &infrav1.EdgeHostList{}
	if err := s.client.List(ctx, cps, client.InNamespace(h.Namespace),
		client.MatchingLabels{infrav1.ClusterLabel: name, infrav1.ControlPlaneLabel: "true"}); err != nil {
		return r
	}
	sort.Slice(cps.Items, func(i, j int) bool { return cps.Items[i].Name < cps.Items[j].Name })
	var others []string
	for i := range cps.Items {
		cp := &cps.Items[i]
		if cp.Name == h.Name || hostphase.Phase(cp) != infrav1.HostProvisioned || !s.claimedFor(ctx, cp, name) {
			continue
		}
		for _, a := range cp.Status.Addresses {
			if a.Type == infrav1.MachineInternalIP && net.ParseIP(a.Address) != nil && !slices.Contains(others, a.Address) {
				others = append(others, a.Address)
				break
			}
		}
	}
	if h.Labels[infrav1.ControlPlaneLabel] == "true" && (hostphase.Phase(h) == infrav1.HostProvisioned || len(others) == 0) {
		r.Addresses = append(r.Addresses, "127.0.0.1")
	}
	r.Addresses = append(r.Addresses, others...)
	if len(r.Addresses) > wire.MaxReachAddresses {
		r.Addresses = r.Addresses[:wire.MaxReachAddresses]
	}
	return r
}

// claimedFor tells whether h is claimed by a machine of cluster: its claim
// names an EdgeMachine that exists with the claim's ID and belongs to the
// cluster. Only such a host may carry the cluster's traffic or be where its
// endpoint resolves; membership labels are a selector's convenience.
func (s *Resolver) claimedFor(ctx context.Context, h *infrav1.EdgeHost, cluster string) bool {
	claim := h.Spec.ClaimRef
	if claim == nil {
		return false
	}
	em := &infrav1.EdgeMachine{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: claim.Name}, em); err != nil {
		return false
	}
	return inventory.ClaimID(em) == claim.UID && em.Labels[clusterv1.ClusterNameLabel] == cluster
}

// kickCluster asks every session of a cluster's hosts to recompute its
// desired state: the cluster's endpoint or control-plane hosts changed,
// and with them every member's Reach.
func (s *Resolver) kickCluster(namespace, cluster string) {
	if cluster == "" {
		return
	}
	hosts := &infrav1.EdgeHostList{}
	if err := s.client.List(context.Background(), hosts, client.InNamespace(namespace),
		client.MatchingLabels{infrav1.ClusterLabel: cluster}); err != nil {
		return
	}
	now := time.Now()
	for i := range hosts.Items {
		s.kick(namespace, hosts.Items[i].Name, now)
	}
}

// MembersChanged kicks the sessions of the clusters whose Reach an event on
// a host can change: it is, or was, one of their control-plane hosts, and
// its membership, claim or addresses changed.
func (s *Resolver) MembersChanged(oldObj, obj any) {
	old, _ := oldObj.(*infrav1.EdgeHost)
	if tomb, ok := oldObj.(toolscache.DeletedFinalStateUnknown); ok {
		old, _ = tomb.Obj.(*infrav1.EdgeHost)
	}
	cur, _ := obj.(*infrav1.EdgeHost)
	if old != nil && cur != nil && old.Labels[infrav1.ClusterLabel] == cur.Labels[infrav1.ClusterLabel] &&
		old.Labels[infrav1.ControlPlaneLabel] == cur.Labels[infrav1.ControlPlaneLabel] &&
		(old.Spec.ClaimRef == nil) == (cur.Spec.ClaimRef == nil) &&
		hostphase.Phase(old) == hostphase.Phase(cur) &&
		equality.Semantic.DeepEqual(old.Status.Addresses, cur.Status.Addresses) {
		return
	}
	var done []string
	for _, h := range []*infrav1.EdgeHost{old, cur} {
		if h == nil || h.Labels[infrav1.ControlPlaneLabel] != "true" {
			continue
		}
		key := h.Namespace + "/" + h.Labels[infrav1.ClusterLabel]
		if !slices.Contains(done, key) {
			done = append(done, key)
			s.kickCluster(h.Namespace, h.Labels[infrav1.ClusterLabel])
		}
	}
}

// ClusterChanged kicks a cluster's sessions when its endpoint or its edge
// reach setting changes.
func (s *Resolver) ClusterChanged(oldObj, obj any) {
	cur, ok := obj.(*clusterv1.Cluster)
	if !ok {
		return
	}
	if old, ok := oldObj.(*clusterv1.Cluster); ok && old.Spec.ControlPlaneEndpoint == cur.Spec.ControlPlaneEndpoint &&
		old.Annotations[infrav1.EdgeReachAnnotation] == cur.Annotations[infrav1.EdgeReachAnnotation] {
		return
	}
	s.kickCluster(cur.Namespace, cur.Name)
}
