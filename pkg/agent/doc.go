// Package agent is fleet-agent's core, shaped like the kubelet's sync loop:
//
//	sources: the hub session (pkg/agent/session) sends Updates on a
//	         channel; link health; a resync timer; housekeeping
//	  → one loop (Agent.Run's syncLoop) that dispatches each of them
//	    → the reach owner (pkg/agent/reach: the endpoint's hosts entry),
//	      the interrupt of a bootstrap whose claim was released, and the
//	      worker, which applies the newest desired state through a
//	      Provisioner, in generation order
//	      → the status manager (pkg/agent/status), which sends the full
//	        status after every change and after every reconnect.
//
// The tunnel server (pkg/agent/tunnel) serves the streams the hub opens on
// the session, to the endpoint the reach owner allows. Everything the agent
// must remember lives in the state store (pkg/agent/state), written
// atomically, so a restart resumes without enrolling again, never applies
// an older generation after a newer one and never runs a completed
// bootstrap twice. The systemd watchdog is pinged only while the loop goes
// round and no worker is stuck (Agent.LastHealthy).
package agent
