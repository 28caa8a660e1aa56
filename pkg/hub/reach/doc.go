// Package reach gives Cluster API, and operators, a way into edge clusters
// no one can dial: an HTTP CONNECT proxy in the hub whose connections go
// out through the agents' own sessions (Dialer: a tunnel through a
// connected agent of the cluster, control-plane hosts first), and a
// reconciler that points each fleet cluster's kubeconfig Secret at it.
// The Resolver tells each host how its cluster's endpoint name resolves at
// its site (the Reach of its desired state).
//
// Security model: a client must present the per-cluster credential (HTTP
// Basic in Proxy-Authorization, derived from the hub CA key, so there is no
// extra secret to store); it may ask only for that cluster's
// controlPlaneEndpoint; the agent checks the target again against the
// endpoint the hub told it and dials nothing else. The workload cluster's
// TLS is end to end: the hub never sees inside it.
package reach

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
