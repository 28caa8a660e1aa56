// Package testhost makes real edge hosts on one Linux machine, for the
// end-to-end tests, the demo and the benchmarks: each host is a box booted
// from the edge image's root file system (make test-image), with the
// image's systemd as PID 1, in namespaces of the kit's own (mount, PID,
// UTS, IPC, cgroup) and a network namespace behind a site bridge whose
// only way out is an outbound forwarder to the hub. Its cgroup parent
// /fleet-<name> is mounted writable as its cgroup root (as kind boots a
// node), so the image's units, containerd, kubelet and fleet-agent run as
// on a real box, hardening and D-Bus included. Each host's pod range is
// routed through it on the other hosts of its site, as a host-gateway CNI
// would, so pods on different hosts reach each other. For fault tests a
// host's power can be cut and restored (PowerCut, PowerOn) and a site's
// uplink cut without telling either end (CutUplink, RestoreUplink).
//
// Everything a host makes is recorded under RecordDir while it runs, so
// Sweep can remove it after a run that was killed before it cleaned up.
// It needs root, cgroup v1, util-linux and iproute2 (see Missing).
package testhost
