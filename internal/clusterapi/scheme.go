package clusterapi

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"

	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

// NewScheme knows core Kubernetes, Cluster API (core, kubeadm bootstrap and
// control plane), CRDs and fleet's kinds: everything a process that runs
// both Cluster API and fleet's hub reads.
func NewScheme() *runtime.Scheme {
	scheme := hubreconcilers.NewScheme()
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(bootstrapv1.AddToScheme(scheme))
	utilruntime.Must(controlplanev1.AddToScheme(scheme))
	return scheme
}
