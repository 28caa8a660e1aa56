// Package testhost makes real edge hosts on one Linux machine, for the
// end-to-end tests and the demo: each host is a network namespace behind a
// site bridge whose only way out is an outbound forwarder to the hub, plus a
// mount and UTS namespace with its own /etc/kubernetes, /var/lib/kubelet,
// /var/lib/containerd, /run and hostname, its own cgroup parent, its own
// containerd (the Debian package) and a service manager that answers
// systemd's D-Bus API (test/unitd), so fleet-agent, kubeadm and the kubelet
// run there as they do on a machine booted with systemd. Each host's pod
// range is routed through it on the other hosts of its site, as a
// host-gateway CNI would, so pods on different hosts reach each other.
//
// Site.BootImage boots a box from the edge image's root file system instead,
// with the image's systemd as PID 1 in namespaces of the kit's own and the
// box's cgroup parent writable as its cgroup root (as kind boots a node),
// so the image's units, containerd and kubelet run as on a real box.
//
// Everything a host makes is recorded under RecordDir while it runs, so
// Sweep can remove it after a run that was killed before it cleaned up.
// It needs root, containerd, runc, dbus-daemon and the CNI plugins.
package testhost
