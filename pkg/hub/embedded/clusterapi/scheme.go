package clusterapi

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/edgefleet/fleet/pkg/fleetscheme"
)

// NewScheme knows fleetscheme's kinds and CRDs: everything a process that runs
// both Cluster API and fleet's hub reads.
func NewScheme() *runtime.Scheme {
	scheme := fleetscheme.New()
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	return scheme
}
