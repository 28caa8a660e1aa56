// Package e2e runs fleet end to end on one machine: a hub API server with
// the real Cluster API core and kubeadm bootstrap reconcilers and fleet's
// hub, a second API server playing the workload cluster, and real
// fleet-agent processes, each provisioning a sandbox root with CABPK's
// cloud-config. Only kubeadm/kubelet are simulated (test/nodesim).
package e2e
