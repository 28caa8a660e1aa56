// Package embedded runs a whole management cluster for fleet in one
// process, for trying fleet and for its demo: a local etcd and
// kube-apiserver whose data lives in a directory, the Cluster API core,
// kubeadm bootstrap and fleet CRDs, the real Cluster API core and kubeadm
// bootstrap reconcilers, and fleet's hub (reconcilers and agent gateway).
//
// `fleet-hub dev` is its command. What it runs is what the tests run
// (internal/clusterapi); the kubeadm control-plane reconciler is left out,
// because it needs to reach the workload cluster's etcd — use
// `kubectl fleet create cluster --control-plane=machines` with it.
package embedded
