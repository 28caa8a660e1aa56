#!/bin/sh
# On removal (not on upgrade) stop and disable the agent. Its identity in
# /var/lib/fleet-agent is kept; delete the EdgeHost on the hub to retire it.
set -e
case "$1" in
	remove|0|purge)
		if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
			systemctl disable --now fleet-agent.service || true
			systemctl disable fleet-agent-firstboot.service || true
		fi
		;;
esac
