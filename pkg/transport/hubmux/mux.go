package hubmux

import (
	"context"
	"fmt"
	"net"
)

// Mux is the hub's end of one agent's session, as the gateway uses it. Two
// kinds implement it (New): this package's Session, and hashicorp/yamux's
// server kept as a fallback. Both report a session's end and their
// streams' failures with this package's errors (ErrSessionClosed,
// ErrStreamClosed, ErrStreamReset) and os.ErrDeadlineExceeded, and both
// are tested with the same tests against the agent's yamux client.
type Mux interface {
	// Start serves the session on goroutines of its own and returns.
	Start()
	// AcceptControl waits for the stream the agent opens first, the
	// control stream. Any further stream the agent opens is reset, and
	// Config.OnRefusedStream called.
	AcceptControl(ctx context.Context) (ControlStream, error)
	// OpenTunnel opens a stream towards the agent without waiting for it
	// to be accepted; its Close is a half-close.
	OpenTunnel() (net.Conn, error)
	// Close ends the session and every stream's blocked reads and writes.
	Close() error
	// Done is closed when the session has ended.
	Done() <-chan struct{}
}

// ControlStream is the control stream: a net.Conn that is read only when
// it has something to give, so no goroutine of the caller waits on it.
type ControlStream interface {
	net.Conn
	// SetNotify sets a function called whenever data, the peer's close or
	// the session's end arrives. fn must not block.
	SetNotify(fn func())
	// ReadReady tells that a Read would return at once.
	ReadReady() bool
}

// The kinds of Mux New makes.
const (
	// KindHubmux is this package's Session: one goroutine per session,
	// parked on the socket while the agent is quiet. The default.
	KindHubmux = "hubmux"
	// KindYamux is hashicorp/yamux's server, as the agent runs its client:
	// a fallback, should the hub's own end misbehave. An idle session
	// costs it three goroutines (yamux's reader, parked inside the TLS
	// read path, its writer, and the control stream's reader) and buffers
	// that hubmux does not keep. One difference shows: a stream closed
	// here whose peer never closes its end reads io.EOF, not
	// ErrStreamReset, once CloseTimeout has reset it.
	KindYamux = "yamux"
)

// Kinds lists the kinds New accepts, the default first.
func Kinds() []string { return []string{KindHubmux, KindYamux} }

// CheckKind tells whether New accepts kind, so that a flag can be checked
// before the first agent connects.
func CheckKind(kind string) error {
	switch kind {
	case "", KindHubmux, KindYamux:
		return nil
	}
	return fmt.Errorf("hubmux: unknown kind %q (want %q or %q)", kind, KindHubmux, KindYamux)
}

// New returns the hub's end of a session over conn, of the kind named
// ("" is KindHubmux). Call Start on it once the caller is ready.
func New(kind string, conn net.Conn, cfg Config) (Mux, error) {
	if err := CheckKind(kind); err != nil {
		return nil, err
	}
	if kind == KindYamux {
		return newYamuxMux(conn, cfg)
	}
	return Server(conn, cfg), nil
}

var (
	_ Mux           = (*Session)(nil)
	_ ControlStream = (*Stream)(nil)
)

// AcceptControl is Accept, for the Mux interface.
func (s *Session) AcceptControl(ctx context.Context) (ControlStream, error) {
	st, err := s.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return st, nil
}

// OpenTunnel is Open, for the Mux interface.
func (s *Session) OpenTunnel() (net.Conn, error) {
	st, err := s.Open()
	if err != nil {
		return nil, err
	}
	return st, nil
}
