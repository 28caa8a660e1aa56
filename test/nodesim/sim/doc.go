// Package sim is the node simulator: it stands in for kubeadm and the
// kubelet on machines that cannot run them. `kubeadm init`/`join` leave
// what Cluster API can see of a successful join — a Ready Node with the
// configured name, providerID and taints in the workload cluster (on a control-plane
// node also the role label, Running mirror pods and, on init,
// kube-system/kubeadm-config) — and `kubeadm reset` removes it. It
// short-cuts nothing else: the bootstrap data around it runs for real.
//
// test/nodesim wraps it as a `kubeadm` binary for sandboxes; the scale
// benchmarks call it in-process for hundreds of simulated hosts.
package sim
