// Package sessions holds the agents' sessions on this hub replica and
// keeps each agent's desired state in step with its EdgeHost.
//
// A Session is one agent's multiplexed connection after authentication:
// the Hello, then the agent's messages (status reports go to hoststatus, a
// certificate request to identity's rotation), and a lastSeen timer. An
// idle session holds one goroutine, the mux's, parked on the socket: a
// handler runs only while the agent's messages wait.
//
// The Registry knows which sessions this replica holds, one per host, and
// pushes each host's full desired state (assignment with its bootstrap
// data, a deprovision order, how to reach its cluster) on connect and on
// every change the informer cache shows, from a bounded set of shared push
// workers: level-triggered, so re-sending is harmless and a change costs
// no API read but the bootstrap Secret of a new assignment. An agent sees
// only its own host's data.
package sessions

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch
