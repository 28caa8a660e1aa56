// Package tunnel is fleet-agent's side of edge reach (docs/EDGE-REACH.md):
// it serves the streams the hub opens on the agent's session, each asking
// for one connection to the host's cluster API endpoint. A target the
// reach owner does not allow is refused; at most MaxOpen tunnels run at
// once, and idle or half-closed ones are closed.
package tunnel
