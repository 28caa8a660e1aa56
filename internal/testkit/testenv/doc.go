// Package testenv starts what fleet's integration tests stand on: a real
// kube-apiserver and etcd (built from Go modules into bin/k8s by `make
// test`), the Cluster API core CRDs taken from the module, fleet's CRDs, the
// REAL Cluster API v1.14 reconcilers for Cluster, Machine, MachineSet and
// MachineDeployment, and fleet's hub reconcilers, each set in its own
// manager as they run in production.
//
// The kubeconfig Secret of every test Cluster points back at the same API
// server, which therefore also plays the workload cluster: a Node created in
// it is what Cluster API finds when it looks for a Machine's node.
package testenv
