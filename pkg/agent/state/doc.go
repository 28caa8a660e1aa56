// Package state is fleet-agent's state store: the directory (by default
// /var/lib/fleet-agent) that holds the host's identity (key 0600, client
// certificate, pinned hub CA), the last desired state received and what the
// agent has applied (generation, workload). Every write is atomic, so a
// restart resumes where the agent was, without enrolling again and without
// ever applying an older generation after a newer one.
package state
