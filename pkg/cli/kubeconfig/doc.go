// Package kubeconfig is `kubectl fleet kubeconfig CLUSTER`: the workload
// cluster's admin kubeconfig, whose cluster entry reaches the edge cluster
// through the hub's edge-reach proxy.
package kubeconfig
