package clusterapi

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

// NewScheme knows fleetscheme's kinds, every built-in group and CRDs:
// everything a process that runs both Cluster API and fleet's hub reads.
func NewScheme() *runtime.Scheme {
	scheme := fleetscheme.New()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	return scheme
}
