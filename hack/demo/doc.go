// Command demo runs fleet on one machine, with nothing but this
// repository: `make demo` builds what is missing and runs it.
//
// It starts the embedded hub (`fleet-hub dev`, with the KubeadmControlPlane
// reconciler and edge reach) and edge hosts. Where the machine can (root,
// cgroup v1, and the edge image make test-image builds into bin/edge-image
// with tools it installs from Debian with apt-get unless --no-install),
// the hosts are real (internal/testkit/testhost): boxes booted from the
// edge image with systemd as PID 1, in namespaces of their own behind a
// site's NAT router, where the packaged fleet-agent runs real kubeadm and
// the kubelet. They end with the demo, so each run starts over. Elsewhere, or with --nodes=simulated, each agent
// provisions a sandbox root where the node simulator stands in for kubeadm
// and a local API server plays the edge cluster's, with an external etcd;
// KubeadmControlPlane judges it by the Nodes and static pods the simulator
// registers. That fleet is kept in --data-dir between runs.
//
// It enrolls the hosts with `kubectl fleet token create`, creates a cluster
// with `kubectl fleet create cluster demo --wait`, describes it (with real
// hosts, also shows a pod reaching a Service by its DNS name), and keeps
// running, reading commands (stop/start an agent, restart the hub) from its
// input until Ctrl-C or `quit`.
package main
