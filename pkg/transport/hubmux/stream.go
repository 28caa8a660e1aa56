package hubmux

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Stream is one stream of a session: a net.Conn whose Close is a
// half-close (it sends FIN and reads on until the peer's FIN), as in yamux.
type Stream struct {
	s  *Session
	id uint32

	// notify, if set, is called on the session's goroutine whenever a
	// Read would no longer block.
	notify atomic.Pointer[func()]

	mu sync.Mutex
	// buf[off:] is what arrived and was not read yet; nil when empty, so
	// an idle stream keeps no buffer.
	buf []byte
	off int
	// recvWindow is what the peer may still send; sendWindow what this
	// end may. inflight is admitted data still being read off the
	// connection: not in buf yet, but not room to give back either.
	recvWindow, sendWindow, inflight        uint32
	localClosed, remoteClosed, reset, ended bool
	readDeadline, writeDeadline             time.Time
	closeTimer                              *time.Timer

	// readable and writable wake a blocked Read or Write.
	readable, writable chan struct{}
}

func newStream(s *Session, id uint32) *Stream {
	return &Stream{s: s, id: id, recvWindow: window, sendWindow: window,
		readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// SetNotify sets a function called, on the session's goroutine, whenever
// data, the peer's close or the session's end arrives: the caller reads
// the stream only then, and no goroutine waits on it in between. fn must
// not block.
func (st *Stream) SetNotify(fn func()) {
	st.notify.Store(&fn)
}

func (st *Stream) notifyReadable() {
	wake(st.readable)
	if fn := st.notify.Load(); fn != nil {
		(*fn)()
	}
}

// ReadReady tells that a Read would return at once: data waits, or the
// stream or its session has ended.
func (st *Stream) ReadReady() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.buf) > st.off || st.remoteClosed || st.reset || st.ended
}

// admit takes length bytes from the receive window, or tells that the peer
// overran it.
func (st *Stream) admit(length uint32) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if length > st.recvWindow {
		return false
	}
	st.recvWindow -= length
	st.inflight += length
	return true
}

// deliver queues data that arrived.
func (st *Stream) deliver(data []byte) {
	st.mu.Lock()
	st.inflight -= uint32(len(data))
	if st.reset || st.ended {
		st.mu.Unlock()
		return
	}
	if len(st.buf) == st.off {
		st.buf, st.off = data, 0
	} else {
		st.buf = append(st.buf[st.off:], data...)
		st.off = 0
	}
	st.mu.Unlock()
	st.notifyReadable()
}

// grantSend adds the peer's window update.
func (st *Stream) grantSend(delta uint32) {
	if delta == 0 {
		return
	}
	st.mu.Lock()
	st.sendWindow += delta
	st.mu.Unlock()
	wake(st.writable)
}

// processFlags applies the peer's ACK, FIN and RST.
func (st *Stream) processFlags(flags uint16) {
	if flags&(flagFIN|flagRST) == 0 {
		return
	}
	st.mu.Lock()
	forget := false
	if flags&flagFIN != 0 && !st.remoteClosed {
		st.remoteClosed = true
		forget = st.localClosed
	}
	if flags&flagRST != 0 {
		st.reset = true
		forget = true
	}
	if forget && st.closeTimer != nil {
		st.closeTimer.Stop()
		st.closeTimer = nil
	}
	st.mu.Unlock()
	if forget {
		st.s.forget(st.id)
	}
	wake(st.writable)
	st.notifyReadable()
}

// sessionClosed ends the stream with its session.
func (st *Stream) sessionClosed() {
	st.mu.Lock()
	st.ended = true
	if st.closeTimer != nil {
		st.closeTimer.Stop()
		st.closeTimer = nil
	}
	st.mu.Unlock()
	wake(st.writable)
	st.notifyReadable()
}

// Read reads what arrived, waiting for data if none did. After the peer's
// FIN, or the session's end, and once the data is read, it returns io.EOF.
func (st *Stream) Read(p []byte) (int, error) {
	for {
		st.mu.Lock()
		if len(st.buf) > st.off {
			n := copy(p, st.buf[st.off:])
			st.off += n
			if st.off == len(st.buf) {
				st.buf, st.off = nil, 0
			}
			delta := st.windowUpdate()
			st.mu.Unlock()
			if delta > 0 {
				// A failed update ends the session; the data read stands.
				_ = st.s.writeFrame(typeWindowUpdate, 0, st.id, delta, nil)
			}
			return n, nil
		}
		switch {
		case st.reset:
			st.mu.Unlock()
			return 0, ErrStreamReset
		case st.remoteClosed || st.ended:
			st.mu.Unlock()
			return 0, io.EOF
		}
		deadline := st.readDeadline
		st.mu.Unlock()
		if err := wait(st.readable, deadline); err != nil {
			return 0, err
		}
	}
}

// windowUpdate gives the peer back the room the reads made, once it is
// at least half the window (as yamux does, so small reads cost no frame).
func (st *Stream) windowUpdate() uint32 {
	if st.remoteClosed || st.reset {
		return 0
	}
	delta := window - uint32(len(st.buf)-st.off) - st.inflight - st.recvWindow
	if delta < window/2 {
		return 0
	}
	st.recvWindow += delta
	return delta
}

// Write writes p in frames no larger than the peer's window allows,
// waiting for its window updates.
func (st *Stream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		st.mu.Lock()
		switch {
		case st.reset:
			st.mu.Unlock()
			return written, ErrStreamReset
		case st.ended:
			st.mu.Unlock()
			return written, ErrSessionClosed
		case st.localClosed:
			st.mu.Unlock()
			return written, ErrStreamClosed
		}
		if st.sendWindow == 0 {
			deadline := st.writeDeadline
			st.mu.Unlock()
			if err := wait(st.writable, deadline); err != nil {
				return written, err
			}
			continue
		}
		n := min(uint32(len(p)), st.sendWindow, maxWrite)
		st.sendWindow -= n
		st.mu.Unlock()
		if err := st.s.writeFrame(typeData, 0, st.id, n, p[:n]); err != nil {
			return written, err
		}
		written += int(n)
		p = p[n:]
	}
	return written, nil
}

// Close closes this end for writing (FIN); reads go on until the peer's
// FIN. A peer that never closes its end is reset after the session's
// CloseTimeout.
func (st *Stream) Close() error {
	st.mu.Lock()
	if st.localClosed || st.reset || st.ended {
		st.mu.Unlock()
		return nil
	}
	st.localClosed = true
	forget := st.remoteClosed
	if !forget {
		st.closeTimer = time.AfterFunc(st.s.cfg.CloseTimeout, st.closeTimedOut)
	}
	st.mu.Unlock()
	wake(st.writable)
	err := st.s.writeFrame(typeWindowUpdate, flagFIN, st.id, 0, nil)
	if forget {
		st.s.forget(st.id)
	}
	return err
}

func (st *Stream) closeTimedOut() {
	st.mu.Lock()
	if st.reset || st.ended || st.remoteClosed {
		st.mu.Unlock()
		return
	}
	st.reset = true
	st.closeTimer = nil
	st.mu.Unlock()
	st.s.forget(st.id)
	_ = st.s.writeFrame(typeWindowUpdate, flagRST, st.id, 0, nil)
	st.notifyReadable()
}

// wait blocks until ch is signalled or the deadline passes. A deadline
// change also signals ch, so the caller looks again.
func wait(ch chan struct{}, deadline time.Time) error {
	if deadline.IsZero() {
		<-ch
		return nil
	}
	d := time.Until(deadline)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return os.ErrDeadlineExceeded
	}
}

// SetDeadline sets both deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	_ = st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

// SetReadDeadline bounds blocked and future Reads.
func (st *Stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	st.readDeadline = t
	st.mu.Unlock()
	wake(st.readable)
	return nil
}

// SetWriteDeadline bounds Writes waiting for the peer's window.
func (st *Stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	st.writeDeadline = t
	st.mu.Unlock()
	wake(st.writable)
	return nil
}

// LocalAddr is the session's local address.
func (st *Stream) LocalAddr() net.Addr { return st.s.LocalAddr() }

// RemoteAddr is the session's remote address.
func (st *Stream) RemoteAddr() net.Addr { return st.s.RemoteAddr() }

var _ net.Conn = (*Stream)(nil)
