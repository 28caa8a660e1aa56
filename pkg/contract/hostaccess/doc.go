// Package hostaccess is the hub's host-access API: the subresources
// edgehosts/log and edgehosts/facts of API group
// hostaccess.fleet.edgefleet.io, served by the hub through the Kubernetes
// API server's aggregation layer, so `kubectl fleet host logs|facts` and
// RBAC work as for any Kubernetes resource.
// +kubebuilder:skip
package hostaccess
