// Package hostaccess serves the hub's host-access streams on the agent:
// one of the agent's logs (its own recent log, the whole output of the
// last bootstrap or reset), redacted before it leaves the host, and what
// the agent knows of its host.
package hostaccess
