package hostaccess

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// The API group and version the hub serves.
const (
	Group   = "hostaccess.fleet.edgefleet.io"
	Version = "v1alpha1"
	// GroupVersion is Group/Version.
	GroupVersion = Group + "/" + Version
	// APIServiceName names the APIService that registers it.
	APIServiceName = Version + "." + Group
)

// Resource and subresources, as RBAC names them:
//
//	apiGroups: ["hostaccess.fleet.edgefleet.io"]
//	resources: ["edgehosts/log", "edgehosts/facts"]
//	verbs: ["get"]
const (
	Resource       = "edgehosts"
	SubresourceLog = "log"
	// SubresourceFacts answers with an EdgeHostFacts.
	SubresourceFacts = "facts"
)

// Query parameters of edgehosts/log.
const (
	ParamSource       = "source"
	ParamSinceSeconds = "sinceSeconds"
	ParamTailLines    = "tailLines"
	ParamLimitBytes   = "limitBytes"
	ParamFollow       = "follow"
)

// Path is the URL path of a host's subresource.
func Path(namespace, name, subresource string) string {
	return "/apis/" + GroupVersion + "/namespaces/" + namespace + "/" + Resource + "/" + name + "/" + subresource
}

// EdgeHostFacts is what a host's agent knows of its host, as it answered
// just now.
type EdgeHostFacts struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Observed is when the hub asked.
	Observed metav1.Time `json:"observed"`
	// Report is the agent's answer.
	Report wire.FactsReport `json:"report"`
}
