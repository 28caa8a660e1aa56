package hubmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/edgefleet/fleet/pkg/transport"
)

// Config tunes a session. The zero value is usable.
type Config struct {
	// CloseTimeout is how long a stream closed here waits for the peer to
	// close its end before it is reset and forgotten (default 10 s).
	CloseTimeout time.Duration
	// OnRefusedStream, if set, is called (on the session's goroutine) for
	// each stream the peer opens beyond its first.
	OnRefusedStream func()
}

// Session is the hub's end of one agent's session over conn.
type Session struct {
	conn net.Conn
	cfg  Config

	// writeMu serialises frames on conn; each frame is one Write.
	writeMu sync.Mutex

	mu sync.Mutex
	// control is the stream the peer opened; tunnels are the ones opened
	// here (nil until the first).
	control   *Stream
	tunnels   map[uint32]*Stream
	nextID    uint32
	accepted  chan *Stream
	goneAway  bool
	closed    bool
	done      chan struct{}
	closeOnce sync.Once
	// err is why the session ended, set before done is closed.
	err error

	startOnce sync.Once
	// hdr is the header being read; only the goroutine reading frames
	// touches it (one at a time: each hands over to the next by starting
	// it).
	hdr header
}

// Server returns the hub's end of a session over conn. Nothing is read
// until Start or Serve runs.
func Server(conn net.Conn, cfg Config) *Session {
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 10 * time.Second
	}
	return &Session{conn: conn, cfg: cfg, nextID: 2,
		accepted: make(chan *Stream, 1), done: make(chan struct{})}
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// Close ends the session: the connection is closed, and every stream's
// blocked reads and writes return.
func (s *Session) Close() error {
	s.endWith(ErrSessionClosed)
	return nil
}

// endWith closes the session, err telling why (Serve returns it), unless
// it has ended already.
func (s *Session) endWith(err error) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.err = err
		streams := make([]*Stream, 0, 1+len(s.tunnels))
		if s.control != nil {
			streams = append(streams, s.control)
		}
		for _, st := range s.tunnels {
			streams = append(streams, st)
		}
		s.mu.Unlock()
		close(s.done)
		_ = s.conn.Close()
		for _, st := range streams {
			st.sessionClosed()
		}
	})
}

// Accept waits for the stream the peer opens first: the control stream.
func (s *Session) Accept(ctx context.Context) (*Stream, error) {
	s.mu.Lock()
	ch := s.accepted
	s.mu.Unlock()
	select {
	case st := <-ch:
		// The channel served its one stream: an idle session keeps
		// nothing it does not use.
		s.mu.Lock()
		s.accepted = nil
		s.mu.Unlock()
		return st, nil
	case <-s.done:
		return nil, ErrSessionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Open opens a stream towards the peer. It does not wait for the peer to
// accept it: writes may start at once, within the first window.
func (s *Session) Open() (*Stream, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, ErrSessionClosed
	case s.goneAway:
		s.mu.Unlock()
		return nil, errors.New("hubmux: the peer accepts no more streams")
	case s.nextID >= 1<<31:
		s.mu.Unlock()
		return nil, errors.New("hubmux: stream ids exhausted")
	}
	id := s.nextID
	s.nextID += 2
	st := newStream(s, id)
	if s.tunnels == nil {
		s.tunnels = make(map[uint32]*Stream)
	}
	s.tunnels[id] = st
	s.mu.Unlock()
	if err := s.writeFrame(typeWindowUpdate, flagSYN, id, 0, nil); err != nil {
		s.forget(id)
		return nil, err
	}
	return st, nil
}

// NumStreams is the number of streams open, the control stream included.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.tunnels)
	if s.control != nil {
		n++
	}
	return n
}

// Serve reads and handles frames until the connection fails, the peer
// breaks the protocol or goes away, or Close is called, and returns why.
// When it returns the session is closed.
func (s *Session) Serve() error {
	s.Start()
	<-s.done
	return s.err
}

// Start serves the session (as Serve) on goroutines of its own and
// returns at once.
//
// A connection that is a transport.ReadWaiter (a transport.HubConn) is
// read so: when nothing is buffered, the goroutine that read the last
// frame starts a fresh one, which waits on the socket a few frames deep,
// and ends. An idle session thus holds one goroutine with a new
// goroutine's stack (2 KiB, or the runtime's recent average), where one
// parked inside the websocket and TLS read path keeps the 4–8 KiB that
// path grew it to. Start and Serve start reading once.
func (s *Session) Start() {
	s.startOnce.Do(func() { go s.run(false) })
}

// errHandedOff: serve passed the session to a goroutine that waits for
// data.
var errHandedOff = errors.New("hubmux: handed off")

func (s *Session) run(waited bool) {
	err := s.serve(waited)
	if errors.Is(err, errHandedOff) {
		return
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.EOF
	}
	s.endWith(err)
}

// awaitData waits for the peer's next frame and serves from it.
func (s *Session) awaitData(w transport.ReadWaiter) {
	if err := w.WaitReadable(); err != nil {
		s.endWith(err)
		return
	}
	s.run(true)
}

// serve reads frames; waited says the socket was just found readable, so
// the first read goes to it rather than asking what is buffered above it
// (which reads nothing from the socket).
func (s *Session) serve(waited bool) error {
	w, canWait := s.conn.(transport.ReadWaiter)
	for first := true; ; first = false {
		if canWait && !(first && waited) {
			buffered, err := w.Buffered()
			if err != nil {
				return err
			}
			if !buffered {
				go s.awaitData(w)
				return errHandedOff
			}
		}
		if _, err := io.ReadFull(s.conn, s.hdr[:]); err != nil {
			return err
		}
		if s.hdr[0] != protoVersion {
			return s.protocolError(fmt.Errorf("version %d", s.hdr[0]))
		}
		var err error
		switch s.hdr.typ() {
		case typeData, typeWindowUpdate:
			err = s.handleStream(s.hdr.typ(), s.hdr.flags(), s.hdr.streamID(), s.hdr.length())
		case typePing:
			if s.hdr.flags()&flagSYN != 0 {
				err = s.writeFrame(typePing, flagACK, 0, s.hdr.length(), nil)
			}
		case typeGoAway:
			if s.hdr.length() != goAwayNormal {
				return fmt.Errorf("hubmux: the peer went away (code %d)", s.hdr.length())
			}
			s.mu.Lock()
			s.goneAway = true
			s.mu.Unlock()
		default:
			return s.protocolError(fmt.Errorf("message type %d", s.hdr.typ()))
		}
		if err != nil {
			return err
		}
	}
}

// protocolError tells the peer, as yamux does, and ends the session.
func (s *Session) protocolError(err error) error {
	_ = s.writeFrame(typeGoAway, 0, 0, goAwayProtoErr, nil)
	return fmt.Errorf("%w: %w", ErrProtocol, err)
}

func (s *Session) handleStream(typ uint8, flags uint16, id, length uint32) error {
	if flags&flagSYN != 0 {
		if refused, err := s.incoming(id); err != nil {
			return err
		} else if refused {
			return s.discard(typ, length)
		}
	}
	st := s.stream(id)
	if st == nil {
		// Reset or closed here a moment ago: the peer's frames in flight
		// are dropped.
		return s.discard(typ, length)
	}
	st.processFlags(flags)
	if typ == typeWindowUpdate {
		st.grantSend(length)
		return nil
	}
	if length == 0 {
		return nil
	}
	if !st.admit(length) {
		return s.protocolError(fmt.Errorf("stream %d: %d bytes beyond its receive window", id, length))
	}
	// Read outside the stream's lock: a peer that sends a header and
	// stalls must not block the stream's reader. The buffer is exactly
	// the frame, so an idle stream keeps nothing.
	data := make([]byte, length)
	if _, err := io.ReadFull(s.conn, data); err != nil {
		return err
	}
	st.deliver(data)
	return nil
}

// incoming handles a SYN: the peer's first stream is the control stream,
// acknowledged at once (the peer's yamux gives up a stream unacknowledged
// for its open timeout); any other is reset.
func (s *Session) incoming(id uint32) (refused bool, err error) {
	s.mu.Lock()
	if id%2 == 0 || (s.control != nil && s.control.id == id) || s.tunnels[id] != nil {
		s.mu.Unlock()
		return false, s.protocolError(fmt.Errorf("stream %d opened twice or with a hub's id", id))
	}
	if s.control != nil || s.closed {
		s.mu.Unlock()
		if s.cfg.OnRefusedStream != nil {
			s.cfg.OnRefusedStream()
		}
		return true, s.writeFrame(typeWindowUpdate, flagRST, id, 0, nil)
	}
	st := newStream(s, id)
	s.control = st
	accepted := s.accepted
	s.mu.Unlock()
	if err := s.writeFrame(typeWindowUpdate, flagACK, id, 0, nil); err != nil {
		return false, err
	}
	accepted <- st
	return false, nil
}

// discard reads and drops a data frame's payload.
func (s *Session) discard(typ uint8, length uint32) error {
	if typ != typeData || length == 0 {
		return nil
	}
	if length > window {
		return s.protocolError(fmt.Errorf("%d bytes for a closed stream", length))
	}
	_, err := io.CopyN(io.Discard, s.conn, int64(length))
	return err
}

func (s *Session) stream(id uint32) *Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.control != nil && s.control.id == id {
		return s.control
	}
	return s.tunnels[id]
}

// forget drops a stream that both ends have closed, or that was reset.
func (s *Session) forget(id uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.control != nil && s.control.id == id {
		// The control stream stays known: the caller still reads its
		// end, and the peer may not open another.
		return
	}
	delete(s.tunnels, id)
}

// writeFrame writes one frame as one Write on conn. A failed write leaves
// the byte stream in an unknown state, so it ends the session.
func (s *Session) writeFrame(typ uint8, flags uint16, id, length uint32, data []byte) error {
	var h header
	h.encode(typ, flags, id, length)
	buf := h[:]
	if len(data) > 0 {
		buf = make([]byte, headerSize+len(data))
		copy(buf, h[:])
		copy(buf[headerSize:], data)
	}
	s.writeMu.Lock()
	select {
	case <-s.done:
		s.writeMu.Unlock()
		return ErrSessionClosed
	default:
	}
	_, err := s.conn.Write(buf)
	s.writeMu.Unlock()
	if err != nil {
		s.endWith(fmt.Errorf("hubmux: writing a frame: %w", err))
		return ErrSessionClosed
	}
	return nil
}

// LocalAddr is the connection's local address.
func (s *Session) LocalAddr() net.Addr { return s.conn.LocalAddr() }

// RemoteAddr is the connection's remote address.
func (s *Session) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }
