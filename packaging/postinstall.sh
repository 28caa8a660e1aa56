#!/bin/sh
# Enable the unit, but do not start an agent that is not configured yet: the
# unit's ConditionPathExists keeps it inactive until
# /etc/fleet-agent/config.yaml exists, and an upgrade restarts a running one.
set -e
# DPKG_ROOT is set when dpkg installs into another root (--root, chrootless
# scripts): that root's systemd is not this machine's, so leave it alone.
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	systemctl enable fleet-agent.service || true
	if [ -f /etc/fleet-agent/config.yaml ]; then
		systemctl try-restart fleet-agent.service || true
	fi
fi
