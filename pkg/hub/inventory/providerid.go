package inventory

import (
	"strings"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// ProviderID is the providerID of the node on a host: what the agent gives
// the kubelet and what Cluster API matches the Node by.
func ProviderID(h *infrav1.EdgeHost) string {
	return ProviderIDOf(h.Namespace, h.Name)
}

// ProviderIDOf is the providerID of the node on EdgeHost namespace/name.
func ProviderIDOf(namespace, name string) string {
	return "edge://" + namespace + "/" + name
}

// HostOfProviderID is the EdgeHost a providerID names in namespace, or ""
// when it names none there.
func HostOfProviderID(namespace, providerID string) string {
	rest, ok := strings.CutPrefix(providerID, "edge://"+namespace+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return ""
	}
	return rest
}
