package clusterapi

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	bootstrapv1beta1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta1"       //nolint:staticcheck // Cluster API's webhooks still convert from v1beta1
	controlplanev1beta1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta1" //nolint:staticcheck // as above
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"                      //nolint:staticcheck // as above
	runtimev1alpha1 "sigs.k8s.io/cluster-api/api/runtime/v1alpha1"                 //nolint:staticcheck // its webhook converts ExtensionConfigs from it
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"

	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

// NewScheme knows fleetscheme's kinds, every built-in group, CRDs, Cluster
// API's older v1beta1 kinds, which its webhooks convert from, and its
// ExtensionConfigs (both versions), which register runtime extensions: everything a
// process that runs both Cluster API and fleet's hub reads.
func NewScheme() *runtime.Scheme {
	scheme := fleetscheme.New()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(clusterv1beta1.AddToScheme(scheme))
	utilruntime.Must(bootstrapv1beta1.AddToScheme(scheme))
	utilruntime.Must(controlplanev1beta1.AddToScheme(scheme))
	utilruntime.Must(runtimev1alpha1.AddToScheme(scheme))
	utilruntime.Must(runtimev1.AddToScheme(scheme))
	return scheme
}
