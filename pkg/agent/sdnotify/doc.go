// Package sdnotify tells systemd the truth about fleet-agent (Type=notify):
// READY=1 once local initialisation is done (never waiting for the hub, so an
// offline site still boots), STATUS= on every connection change, and
// WATCHDOG=1 only while the agent's sync loop is demonstrably alive, so a
// stuck loop stops the pings and systemd restarts the agent.
package sdnotify
