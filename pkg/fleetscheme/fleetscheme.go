// Package fleetscheme builds the runtime scheme of the kinds fleet's
// processes read and write: core Kubernetes, Cluster API core, the kubeadm
// bootstrap and control-plane kinds, and fleet's own. The hub and the CLI
// share it, so neither needs the other's packages to talk to the API server.
package fleetscheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// New returns a scheme that knows every kind fleet reads or writes.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	AddToScheme(s)
	return s
}

// AddToScheme registers those kinds with s.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(clusterv1.AddToScheme(s))
	utilruntime.Must(bootstrapv1.AddToScheme(s))
	utilruntime.Must(controlplanev1.AddToScheme(s))
	utilruntime.Must(infrav1.AddToScheme(s))
}
