// Package gateway is the hub's door for edge agents. It runs on every hub
// replica (not only the leader) and serves, over TLS with a certificate from
// the hub CA:
//
//	GET  /v1/ca       the CA bundle agents pin (public)
//	POST /v1/enroll   token + CSR → EdgeHost + client certificate
//	GET  /v1/connect  the session: a websocket, authenticated by the client
//	                  certificate before the upgrade, multiplexed with the
//	                  yamux protocol (transport/hubmux: one goroutine a session)
//
// Over a session the hub pushes the host's full desired state on connect and
// whenever it changes (from the informer cache), and writes what the agent
// reports into EdgeHost status only when it changed. Connectivity is judged
// by the hub's clock: AgentConnected changes only on transitions and
// lastSeenTime is refreshed coarsely, so an idle fleet costs the API server
// no writes per heartbeat.
package gateway

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts/status,verbs=get;update;patch
