// Package gateway is the hub's door for edge agents: the HTTP front that
// runs on every hub replica (not only the leader) and wires the rooms that
// do the work. Over TLS with a certificate from the hub CA it serves:
//
//	GET  /v1/ca       the CA bundle agents pin (public)
//	POST /v1/enroll   token + CSR → EdgeHost + client certificate (enrollment.Enroller)
//	GET  /v1/connect  the session: a websocket, authenticated by the client
//	                  certificate before the upgrade (identity), multiplexed
//	                  with the yamux protocol (transport/hubmux), then held
//	                  and served by the sessions.Registry
//
// The rooms: admission (the TLS listener, places and waves: what is taken on
// before a peer has proven who it is), identity (the hub CA, authentication,
// rotation), enrollment (tokens and the Enroller), sessions (the registry
// and the desired-state pushes), hoststatus (the one writer of what the hub
// knows of a host: reports, connectivity, link verdict) and reach (where a
// host's cluster endpoint resolves, and tunnels into clusters).
package gateway

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgekubernetesreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeagentreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeagentrollouts,verbs=get;list;watch
