// Package clusterapi runs upstream Cluster API in-process: the real core
// reconcilers (Cluster, Machine, MachineSet, MachineDeployment,
// MachineHealthCheck, and behind the ClusterTopology gate ClusterClass and
// the topology reconcilers), the kubeadm control plane reconciler (KCP) and
// the real kubeadm bootstrap reconciler, each in its own controller-runtime
// manager wired the way their own binaries wire them and serving its
// provider's admission webhooks, plus the CRDs and webhook configurations
// they need (bundled from the Cluster API module by hack/capicrds).
//
// The test environment (internal/testkit/testenv) and the embedded hub
// (`fleet-hub dev`) both use it, so the demo runs exactly what the tests
// prove.
package clusterapi
