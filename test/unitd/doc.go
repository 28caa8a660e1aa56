// Command unitd plays systemd on a test host that has none: it takes the
// name org.freedesktop.systemd1 on the host's private D-Bus daemon, starts
// the units it is told to from their unit files, restarts them as their
// Restart= says and when asked over D-Bus (fleet-agent's restarts of
// containerd and the kubelet), and on SIGTERM or SIGINT stops every unit
// before it exits. See internal/testkit/unitd for what it supports.
//
// Run as "systemctl" (a link named so, ahead of the real systemctl on
// PATH) it is the client: daemon-reload, start, stop, restart, is-active,
// is-enabled and status over the system bus, so kubeadm's own calls work.
//
//	unitd --bus unix:path=/run/dbus/system_bus_socket --log-dir /var/log/unitd \
//	      --start containerd.service,kubelet.service
package main
