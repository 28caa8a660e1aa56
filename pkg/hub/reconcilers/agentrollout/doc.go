// Package agentrollout moves the agents of many hosts to a new fleet-agent
// release, in waves (EdgeAgentRollout). Each reconcile reads where every
// selected host is from the informer cache — its order, the release its
// agent reports, how its last trial ended — and gives new orders only
// where the spec allows: the canary first, then the waves, never more
// than maxUnavailable hosts of a group moving at once, and none once a
// wave has more failures than its success threshold allows. An order is
// the host's v1alpha1.AgentReleaseAnnotation; the gateway sends it to the
// agent, which fetches, verifies and tries the release, and rolls back by
// itself if it fails. An abort orders the hosts moved back to the release
// each ran before, the last wave first.
package agentrollout

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeagentrollouts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeagentrollouts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgeagentreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
