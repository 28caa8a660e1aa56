// Package embedded runs a whole management cluster for fleet in one
// process, for trying fleet and for its demo: a local etcd and
// kube-apiserver whose data lives in a directory, the Cluster API core,
// kubeadm bootstrap, kubeadm control-plane and fleet CRDs, the real
// Cluster API core (MachineHealthCheck included), kubeadm bootstrap and
// KubeadmControlPlane reconcilers, and fleet's hub (reconcilers, agent
// gateway and edge-reach proxy).
//
// `fleet-hub dev` is its command. What it runs is what the tests run
// (pkg/hub/embedded/clusterapi). The KubeadmControlPlane reconciler reaches each
// workload cluster's API server and etcd through the edge-reach proxy,
// which carries the connection through one of the cluster's agents, so
// edge hosts behind NAT need nothing but their outbound connection.
package embedded
