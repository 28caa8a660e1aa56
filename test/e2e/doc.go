// Package e2e runs fleet end to end on one machine: a hub API server with
// the real Cluster API reconcilers and fleet's hub, and real fleet-agent
// processes. The TestRealNodes… tests run real edge hosts
// (internal/testkit/testhost: kubeadm, kubelet and containerd behind a site's NAT);
// the others provision sandbox roots with CABPK's cloud-config, where the
// node simulator (test/nodesim) plays kubeadm and registers the Node in a
// second API server playing the workload cluster.
package e2e
