// Package transport turns one websocket into a multiplexed session: a
// net.Conn over websocket binary messages, and yamux on top of it, so a slow
// stream (a future tunnel) never stalls the control stream. Hub and agent use
// the same settings from here.
package transport
