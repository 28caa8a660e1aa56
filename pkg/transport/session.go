package transport

import (
	"io"
	"net"
	"time"

	"github.com/hashicorp/yamux"
)

// Settings shared by both ends of a session.
const (
	// KeepAliveInterval is how often the agent's yamux pings; a missed
	// answer within WriteTimeout closes the session, so the agent notices a
	// dead link in about KeepAliveInterval+WriteTimeout even when nothing
	// else is sent. The hub does not ping; it closes a session silent for
	// 4 × KeepAliveInterval (pkg/transport/hubmux serves the hub's end).
	KeepAliveInterval = 15 * time.Second
	// WriteTimeout bounds every write, so a peer that stops reading cannot
	// hold a writer forever.
	WriteTimeout = 10 * time.Second
	// MaxStreams bounds the streams the hub may have waiting for the
	// agent to accept them.
	MaxStreams = 64
)

// YamuxConfig returns the hashicorp/yamux settings of a session's ends:
// pings every keepAlive, none when it is 0 (the hub's end: agents ping).
func YamuxConfig(keepAlive time.Duration) *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = keepAlive > 0
	if keepAlive > 0 {
		c.KeepAliveInterval = keepAlive
	}
	c.ConnectionWriteTimeout = WriteTimeout
	c.StreamOpenTimeout = WriteTimeout
	c.StreamCloseTimeout = WriteTimeout
	c.AcceptBacklog = MaxStreams
	c.LogOutput = io.Discard
	return c
}

// Client runs the agent's end of a session over conn.
func Client(conn net.Conn, keepAlive time.Duration) (*yamux.Session, error) {
	return yamux.Client(conn, YamuxConfig(keepAlive))
}
