// Command nodesim stands in for kubeadm and the kubelet on machines that
// cannot run them (tests, the local demo). Installed as `kubeadm` in a
// sandbox root, it does what a successful `kubeadm init`/`join` leaves
// behind that Cluster API can see — a Ready Node with the configured name and
// providerID in the workload cluster — and `kubeadm reset` removes it (see
// package sim).
//
// It reads the workload cluster's kubeconfig from /etc/fleet-sim/kubeconfig
// inside the sandbox.
package main
