// Package transport turns one websocket into a multiplexed session: a
// net.Conn over websocket binary messages, and the yamux protocol on top of
// it, so a slow stream (a tunnel) never stalls the control stream. The agent
// runs hashicorp/yamux with the settings here (Client); the hub runs its own
// end of the same protocol, subpackage hubmux, at one goroutine a session.
package transport
