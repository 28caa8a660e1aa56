// Package agent is fleet-agent's core, shaped like the kubelet's sync loop:
//
//	sources (the hub session, a resync timer)
//	  → one loop (Agent.Run)
//	    → a worker that applies the desired state through a Provisioner
//	      → a status manager that sends the full status after every change
//	        and after every reconnect.
//
// The agent keeps its identity and state under a state directory (key 0600,
// certificate, pinned CA, host identity, last desired state, last applied
// generation), written atomically, so a restart resumes without enrolling
// again and never applies an older generation after a newer one.
package agent
