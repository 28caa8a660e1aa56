// Package unitd is a small stand-in for systemd on test hosts that have
// none as PID 1: it loads service units from unit files, runs them, and
// answers the part of systemd's D-Bus API (org.freedesktop.systemd1.Manager)
// that fleet-agent's pkg/agent/units uses, so the agent restarts
// containerd and the kubelet there exactly as it does on a real machine.
//
// Supported in unit files (the unit file from the first directory holding
// it, then drop-ins <unit>.d/*.conf of every directory in file-name order):
// [Unit] Description; [Service] ExecStart (one; an empty assignment resets
// the list), ExecStartPre ("-" ignores its failure), Environment,
// EnvironmentFile ("-" = optional; read at each start, after Environment),
// Restart (no, always, on-failure), RestartSec, KillMode (control-group,
// process), TimeoutStopSec and Type. Other settings are ignored.
//
// Differences from systemd, on purpose:
//   - Type=simple, exec and notify all count as started once the main
//     process is exec'd (NOTIFY_SOCKET is not set).
//   - The unit's "control group" is the main process's process group:
//     KillMode=control-group signals the group, KillMode=process the main
//     process only (containerd's shims, in their own groups, survive either
//     way, as they do under systemd with KillMode=process).
//   - Of the Exec prefixes only "-" has an effect; "@", "+", "!" and ":"
//     are accepted and ignored. No start rate limit, no TimeoutStartSec,
//     no dependencies: units start in the order asked.
//   - Output goes to <log dir>/<unit>.log (the journal's stand-in); the
//     environment is PATH plus what the unit sets.
//
// Variables in Exec lines expand as in systemd: a word "$VAR" becomes the
// value split at white space (no word when unset or empty); "${VAR}" is
// replaced inside its word and stays one word (an empty one when unset).
package unitd
