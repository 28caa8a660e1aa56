// Package kubernetesrelease reconciles EdgeKubernetesReleases: it counts,
// in the release's status, the hosts it selects and how many of them have
// staged its version or failed to, from what their agents report. It
// writes nothing else: the gateway sends each host its stage orders.
package kubernetesrelease

// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgekubernetesreleases,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgekubernetesreleases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=edgehosts,verbs=get;list;watch
