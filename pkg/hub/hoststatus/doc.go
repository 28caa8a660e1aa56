// Package hoststatus writes what the hub knows of a host into its
// EdgeHost status, and is the one owner of these fields there: what the
// agent reports (facts, addresses, provisioning, node, certificate expiry,
// link health), its connectivity as the hub's clock judges it
// (AgentConnected, hubReplica, a coarse lastSeenTime, the grace before a
// lost session counts as a lost host, the sweep of hosts whose replica
// stopped) and the LinkDegraded verdict with its events.
//
// Writes happen only on change: a report equal to the last one, a
// reconnect within the grace or to a host that already reads connected,
// and a link report whose verdict holds cost no API write; an idle agent
// costs one lastSeenTime refresh per interval. Writes hold one of a
// bounded number of places, and news that a host is well waits for a
// wave of connections to pass (admission.Waves).
package hoststatus

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
