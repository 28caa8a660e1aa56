// Package hostaccess serves the host-access API (pkg/contract/hostaccess)
// through the Kubernetes API server's aggregation layer: a host's logs
// and facts, fetched from its agent over the agent's own session. The
// aggregation layer authenticates the user and proxies with the user's
// name in headers; the hub checks those headers came from it (its client
// certificate, against the CA the API server publishes), asks the API
// server with a SubjectAccessReview whether the user may, and records
// each access as an Event on the EdgeHost.
package hostaccess

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch
