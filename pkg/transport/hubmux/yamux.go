package hubmux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/edgefleet/fleet/pkg/transport"
)

// yamuxMux is the KindYamux Mux: hashicorp/yamux's server with the
// agent's settings, except that it does not ping (agents do).
type yamuxMux struct {
	ys *yamux.Session
}

func newYamuxMux(conn net.Conn, cfg Config) (*yamuxMux, error) {
	c := transport.YamuxConfig(0)
	if cfg.CloseTimeout > 0 {
		c.StreamCloseTimeout = cfg.CloseTimeout
	}
	ys, err := yamux.Server(newStreamRefuser(conn, cfg.OnRefusedStream), c)
	if err != nil {
		return nil, fmt.Errorf("hubmux: starting a yamux server: %w", err)
	}
	return &yamuxMux{ys: ys}, nil
}

// Start does nothing: yamux serves the session from New on.
func (m *yamuxMux) Start() {}

func (m *yamuxMux) AcceptControl(ctx context.Context) (ControlStream, error) {
	st, err := m.ys.AcceptStreamWithContext(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, ErrSessionClosed
	}
	return newYamuxControl(m, st), nil
}

func (m *yamuxMux) OpenTunnel() (net.Conn, error) {
	st, err := m.ys.OpenStream()
	if err != nil {
		return nil, m.streamError(err)
	}
	return &yamuxStream{Stream: st, m: m}, nil
}

func (m *yamuxMux) Close() error {
	return m.ys.Close()
}

func (m *yamuxMux) Done() <-chan struct{} { return m.ys.CloseChan() }

// NumStreams is the number of streams open, the control stream included.
func (m *yamuxMux) NumStreams() int { return m.ys.NumStreams() }

// streamError turns yamux's errors into the ones Mux promises.
func (m *yamuxMux) streamError(err error) error {
	switch {
	case err == nil, errors.Is(err, io.EOF):
		return err
	case errors.Is(err, yamux.ErrTimeout):
		return os.ErrDeadlineExceeded
	case errors.Is(err, yamux.ErrConnectionReset):
		return ErrStreamReset
	case errors.Is(err, yamux.ErrSessionShutdown), m.ys.IsClosed():
		return ErrSessionClosed
	case errors.Is(err, yamux.ErrStreamClosed):
		return ErrStreamClosed
	}
	return err
}

// yamuxStream is a yamux stream that fails with the errors Mux promises.
type yamuxStream struct {
	*yamux.Stream
	m *yamuxMux
}

func (s *yamuxStream) Read(p []byte) (int, error) {
	n, err := s.Stream.Read(p)
	return n, s.m.streamError(err)
}

func (s *yamuxStream) Write(p []byte) (int, error) {
	n, err := s.Stream.Write(p)
	return n, s.m.streamError(err)
}

// controlAhead bounds what the control stream's reader reads ahead of
// the caller.
const controlAhead = 64 << 10

// yamuxControl is the control stream over yamux. yamux cannot tell
// whether a read would block, so a goroutine of its own (fill) reads the
// stream into a bounded buffer, and calls the notify function, as
// Stream does on the session's goroutine.
type yamuxControl struct {
	yamuxStream
	notify atomic.Pointer[func()]

	mu sync.Mutex
	// buf[off:] is what fill read and the caller did not; nil when empty.
	buf []byte
	off int
	// err ends reading once buf is empty (io.EOF for the peer's close).
	err          error
	readDeadline time.Time

	// readable wakes a blocked Read; drained wakes fill when buf has
	// room again.
	readable, drained chan struct{}
}

func newYamuxControl(m *yamuxMux, st *yamux.Stream) *yamuxControl {
	c := &yamuxControl{yamuxStream: yamuxStream{Stream: st, m: m},
		readable: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
	go c.fill()
	return c
}

// fill reads the stream until it ends, at most controlAhead ahead of the
// caller while the session lasts.
func (c *yamuxControl) fill() {
	chunk := make([]byte, 4<<10)
	for {
		c.mu.Lock()
		full := len(c.buf)-c.off >= controlAhead
		c.mu.Unlock()
		if full {
			select {
			case <-c.drained:
				continue
			case <-c.m.Done():
				// What yamux still holds is read as the stream ends.
			}
		}
		n, err := c.yamuxStream.Read(chunk)
		c.mu.Lock()
		if n > 0 {
			if c.off > 0 {
				c.buf = append(c.buf[:0], c.buf[c.off:]...)
				c.off = 0
			}
			c.buf = append(c.buf, chunk[:n]...)
		}
		if err != nil {
			c.err = err
		}
		c.mu.Unlock()
		wake(c.readable)
		if fn := c.notify.Load(); fn != nil {
			(*fn)()
		}
		if err != nil {
			return
		}
	}
}

func (c *yamuxControl) SetNotify(fn func()) { c.notify.Store(&fn) }

func (c *yamuxControl) ReadReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf) > c.off || c.err != nil
}

// Read reads what fill read, waiting for it if there is none.
func (c *yamuxControl) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		if len(c.buf) > c.off {
			n := copy(p, c.buf[c.off:])
			c.off += n
			if c.off == len(c.buf) {
				c.buf, c.off = nil, 0
			}
			c.mu.Unlock()
			wake(c.drained)
			return n, nil
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, err
		}
		deadline := c.readDeadline
		c.mu.Unlock()
		if err := wait(c.readable, deadline); err != nil {
			return 0, err
		}
	}
}

// SetReadDeadline bounds blocked and future Reads; fill reads on.
func (c *yamuxControl) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.mu.Unlock()
	wake(c.readable)
	return nil
}

func (c *yamuxControl) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

// maxPendingResets bounds the resets waiting for yamux to finish writing
// a frame; more mean the connection is broken.
const maxPendingResets = 64

// streamRefuser is the connection under the yamux server. It resets every
// stream the agent opens after its first, which yamux has no setting for:
// it drops such a stream's opening frame before yamux sees it, and writes
// a reset for it between two of yamux's frames. yamux drops the stream's
// later frames as those of a stream it does not know.
type streamRefuser struct {
	net.Conn
	onRefused func()

	// Only yamux's reader uses these: the last header read, how much of
	// it yamux has been given (headerSize: all), the payload bytes of
	// its frame still to pass, and the agent's first stream.
	hdr     header
	hdrOut  int
	body    uint32
	control uint32

	// writeMu serialises writes. out and outFill are the header of the
	// frame yamux is writing, outBody its payload still to come; resets
	// wait for the frame's end.
	writeMu sync.Mutex
	out     header
	outFill int
	outBody uint32
	resets  []uint32
}

func newStreamRefuser(conn net.Conn, onRefused func()) *streamRefuser {
	return &streamRefuser{Conn: conn, onRefused: onRefused, hdrOut: headerSize}
}

func (r *streamRefuser) Read(p []byte) (int, error) {
	for {
		switch {
		case r.hdrOut < headerSize:
			n := copy(p, r.hdr[r.hdrOut:])
			r.hdrOut += n
			return n, nil
		case r.body > 0:
			if uint64(len(p)) > uint64(r.body) {
				p = p[:r.body]
			}
			n, err := r.Conn.Read(p)
			r.body -= uint32(n)
			return n, err
		}
		if _, err := io.ReadFull(r.Conn, r.hdr[:]); err != nil {
			return 0, err
		}
		if r.hdr.typ() == typeData {
			r.body = r.hdr.length()
		}
		refused, err := r.refuse()
		if err != nil {
			return 0, err
		}
		if !refused {
			r.hdrOut = 0
			continue
		}
		if r.body > window {
			return 0, fmt.Errorf("%w: %d bytes for a refused stream", ErrProtocol, r.body)
		}
		if _, err := io.CopyN(io.Discard, r.Conn, int64(r.body)); err != nil {
			return 0, err
		}
		r.body = 0
	}
}

// refuse tells whether the frame in hdr opens a stream to refuse, and
// resets it if so.
func (r *streamRefuser) refuse() (bool, error) {
	typ, id := r.hdr.typ(), r.hdr.streamID()
	if (typ != typeData && typ != typeWindowUpdate) || r.hdr.flags()&flagSYN == 0 {
		return false, nil
	}
	switch {
	case id%2 == 0:
		return false, fmt.Errorf("%w: stream %d opened with a hub's id", ErrProtocol, id)
	case r.control == 0:
		r.control = id
		return false, nil
	case id == r.control:
		// Opened twice: yamux ends the session.
		return false, nil
	}
	if r.onRefused != nil {
		r.onRefused()
	}
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	if r.outFill != 0 || r.outBody != 0 {
		if len(r.resets) >= maxPendingResets {
			return false, errors.New("hubmux: too many resets waiting for yamux to finish a frame")
		}
		r.resets = append(r.resets, id)
		return true, nil
	}
	return true, r.writeReset(id)
}

// Write writes yamux's bytes and, at the end of a frame, the resets
// waiting for it.
func (r *streamRefuser) Write(p []byte) (int, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	n, err := r.Conn.Write(p)
	r.track(p[:n])
	if err != nil || r.outFill != 0 || r.outBody != 0 {
		return n, err
	}
	for len(r.resets) > 0 {
		if err := r.writeReset(r.resets[0]); err != nil {
			return n, err
		}
		r.resets = r.resets[1:]
	}
	r.resets = nil
	return n, nil
}

// track follows the frames yamux writes, to know where one ends.
func (r *streamRefuser) track(p []byte) {
	for len(p) > 0 {
		if r.outBody > 0 {
			k := min(uint64(len(p)), uint64(r.outBody))
			r.outBody -= uint32(k)
			p = p[k:]
			continue
		}
		k := copy(r.out[r.outFill:], p)
		r.outFill += k
		p = p[k:]
		if r.outFill == headerSize {
			r.outFill = 0
			if r.out.typ() == typeData {
				r.outBody = r.out.length()
			}
		}
	}
}

func (r *streamRefuser) writeReset(id uint32) error {
	var h header
	h.encode(typeWindowUpdate, flagRST, id, 0)
	_, err := r.Conn.Write(h[:])
	return err
}

var (
	_ Mux           = (*yamuxMux)(nil)
	_ ControlStream = (*yamuxControl)(nil)
)
