// Package agenttest holds what tests and load drivers need to run real
// fleet-agents in-process without touching a host: a provisioner that
// records what it is told instead of running it.
package agenttest
