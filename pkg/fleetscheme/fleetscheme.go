package fleetscheme

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// New returns a scheme that knows those kinds.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	AddToScheme(s)
	return s
}

// AddToScheme registers those kinds with s.
func AddToScheme(s *runtime.Scheme) {
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(authenticationv1.AddToScheme(s))
	utilruntime.Must(eventsv1.AddToScheme(s))
	utilruntime.Must(clusterv1.AddToScheme(s))
	utilruntime.Must(bootstrapv1.AddToScheme(s))
	utilruntime.Must(controlplanev1.AddToScheme(s))
	utilruntime.Must(infrav1.AddToScheme(s))
}
