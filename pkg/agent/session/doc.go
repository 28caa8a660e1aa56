// Package session is the hub session source of fleet-agent's sync loop.
// It keeps one session to the hub open, forever: it enrolls when the host
// has no identity (token, pinned CA, CSR), dials the hub's websocket with
// the host's certificate, says Hello, and reads the hub's messages, handing
// each desired state to the loop as an Update; after any failure it waits a
// jittered, growing delay and tries again, and never gives up. On the
// session it also renews the host's certificate before it expires and hands
// the streams the hub opens to the tunnel server.
package session
