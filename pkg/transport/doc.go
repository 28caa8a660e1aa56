// Package transport turns one websocket into a multiplexed session: a
// net.Conn over websocket binary messages, and the yamux protocol on top of
// it, so a slow stream (a tunnel) never stalls the control stream. The agent
// runs hashicorp/yamux with the settings here (Client, YamuxConfig); the hub
// runs its own end of the same protocol, subpackage hubmux, at one goroutine
// a session (or, as a fallback, hashicorp/yamux's server: hubmux.New).
//
// # Why the hub reads its websockets itself
//
// The hub's memory target is per idle agent (≤ 32 KiB at 10,000 agents, see
// docs/PERFORMANCE.md, "Hub memory per idle agent"), and an idle session's
// largest cost is the stack of the goroutine that waits for the agent's
// next frame. Parked inside gorilla's and crypto/tls's read path it is over
// twenty frames deep and keeps the 4–8 KiB of stack that path grew; parked
// on the socket itself it is a few frames deep with a new goroutine's
// stack. So the hub's end of a websocket is a HubConn, which parses the
// agent's frames from the TLS connection and is a ReadWaiter: hubmux asks
// Buffered whether anything waits above the socket and, if not, hands the
// session to a fresh goroutine that waits in WaitReadable.
//
// Buffered rests on one behaviour of crypto/tls that its documentation
// does not promise: a Read on a *tls.Conn whose deadline has passed
// returns the data crypto/tls already holds, or else a timeout, and leaves
// the connection usable (the timeout is not kept as the connection's
// error, even with half a record received).
// TestCryptoTLSSurvivesReadPastDeadline fails, naming the Go version, if a
// release changes that; until HubConn is fixed, the hub can run
// hashicorp/yamux's server instead (hubmux.KindYamux), which never calls
// Buffered and reads through crypto/tls as any client does.
package transport
