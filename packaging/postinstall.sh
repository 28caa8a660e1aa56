#!/bin/sh
# Enable the units, but do not start an agent that is not configured yet: the
# unit's ConditionPathExists keeps it inactive until
# /etc/fleet-agent/config.yaml exists (fleet-agent-firstboot.service may
# write it at boot), and an upgrade restarts a running one.
set -e
# DPKG_ROOT is set when dpkg installs into another root (--root, chrootless
# scripts): that root's systemd is not this machine's, so leave it alone.
[ -z "${DPKG_ROOT:-}" ] || exit 0
command -v systemctl >/dev/null 2>&1 || exit 0
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
# enable also works offline, in the chroot an image is built in.
systemctl enable fleet-agent.service fleet-agent-firstboot.service || true
if [ -d /run/systemd/system ] && [ -f /etc/fleet-agent/config.yaml ]; then
	systemctl try-restart fleet-agent.service || true
fi
