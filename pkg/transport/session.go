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
	// 4 × KeepAliveInterval.
	KeepAliveInterval = 15 * time.Second
	// WriteTimeout bounds every write, so a peer that stops reading cannot
	// hold a writer forever.
	WriteTimeout = 10 * time.Second
	// MaxStreams bounds the streams one peer may have open at once.
	MaxStreams = 64

	// ServerAcceptBacklog bounds the streams an agent may open towards the
	// hub before the hub's timer refuses them: it opens none on purpose
	// (only the control stream), so each one is a misbehaving peer's; yamux
	// resets any beyond the backlog at once.
	ServerAcceptBacklog = 1
)

func config(keepAlive time.Duration) *yamux.Config {
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

// Server runs the hub's end of a session over conn. It does not ping: a
// goroutine per session for it would cost more memory than anything else
// in an idle session. The agent pings; conn should fail reads after a
// silence (NewIdleConn).
func Server(conn net.Conn) (*yamux.Session, error) {
	c := config(0)
	c.AcceptBacklog = ServerAcceptBacklog
	return yamux.Server(conn, c)
}

// Client runs the agent's end of a session over conn.
func Client(conn net.Conn, keepAlive time.Duration) (*yamux.Session, error) {
	return yamux.Client(conn, config(keepAlive))
}
