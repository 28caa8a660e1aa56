// Command demo runs fleet on one machine, with nothing but this
// repository: `make demo` builds what is missing and runs it.
//
// It starts the embedded hub (`fleet-hub dev`), a second local API server
// that plays the edge cluster's own API server, and several real
// fleet-agent processes. Each agent provisions a sandbox root of its own
// (a folder under --data-dir, entered with chroot), where the node
// simulator stands in for kubeadm and the kubelet, which cannot run here.
// Then it enrolls the agents with `kubectl fleet token create`, creates a
// cluster with `kubectl fleet create cluster demo --wait`, describes it,
// and keeps running, reading commands (stop/start an agent, restart the
// hub) from its input until Ctrl-C or `quit`.
//
// Everything is kept in --data-dir: running it again brings the same
// fleet back; --reset starts over. It needs root (the sandboxes use
// chroot and mount namespaces).
package main
