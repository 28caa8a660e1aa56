// Package hubmux is the hub's end of an agent's multiplexed session: the
// yamux protocol (github.com/hashicorp/yamux, spec.md there), which agents
// speak through hashicorp/yamux, served by one goroutine per session.
//
// The hub holds thousands of idle sessions, and hashicorp/yamux costs each
// of them three goroutines once the control stream has a reader, a 4 KiB
// read buffer and a receive buffer per stream kept for the stream's life.
// Here a session is one goroutine (Serve) that reads frames, answers pings
// and window updates itself and writes under a lock instead of through a
// sender goroutine; a stream's receive buffer exists only while data waits
// in it. The control stream is read by whoever the caller wakes with
// Stream.SetNotify, so between messages nothing else runs.
//
// While the agent is quiet, that one goroutine waits on the socket rather
// than in a Read, if the connection is a transport.ReadWaiter (the hub's
// transport.HubConn is): a goroutine parked inside the websocket and TLS
// read path keeps the 4–8 KiB of stack that path grew, a large share of
// what an idle session may cost under the hub's memory target (transport's
// package comment says more). On any other connection the goroutine parks
// in Read.
//
// Only what the hub needs is here: the agent opens exactly one stream (the
// control stream; any further one is reset), the hub opens the others
// (edge-reach tunnels), and the hub never pings (the agent does; the
// caller's connection fails reads after a silence).
//
// Callers use a session through the Mux and ControlStream interfaces, and
// New makes one of either kind: KindHubmux (Session, the default) or
// KindYamux, hashicorp/yamux's server behind the same interfaces. That is
// a fallback: it runs none of this package's framing (only a filter that
// resets the streams an agent should not open) and never waits through
// transport.ReadWaiter, so it rests neither on hubmux nor on the crypto/tls
// behaviour HubConn.Buffered needs. It costs more per idle session (see
// KindYamux) and needs no change on the agents.
package hubmux
