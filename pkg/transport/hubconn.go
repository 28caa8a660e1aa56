package transport

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// ReadWaiter is a connection whose reader can wait for data without
// reading it: the contract between HubConn and pkg/transport/hubmux, which
// parks an idle session's goroutine in WaitReadable instead of in Read
// (see the package comment for why).
type ReadWaiter interface {
	// Buffered tells whether a Read would find data without waiting for
	// the socket. A connection that cannot tell says true.
	Buffered() (bool, error)
	// WaitReadable blocks, without reading, until the socket has data (or
	// its end), or fails when the connection is closed or idle too long.
	// Call it only when Buffered said false.
	WaitReadable() error
}

var _ ReadWaiter = (*HubConn)(nil)

// HubConn is the hub's end of an agent's websocket as a net.Conn, made to
// be idle cheaply. Writes go through gorilla as on the agent's end
// (wsWriter); reads parse the agent's frames straight from the TLS
// connection (RFC 6455, client to server: masked, no extensions), so that
// it can be a ReadWaiter: tell whether data waits anywhere above the
// socket and, if not, wait for the socket without reading. Websocket
// control frames are answered inside Read, which then goes on reading: a
// wake-up for a ping alone leaves the reader inside the TLS path until
// data comes (agents ping through yamux, in data frames).
type HubConn struct {
	wsWriter
	tls net.Conn
	// raw is the TCP connection under TLS, to wait on; nil where that is
	// not possible (then Buffered always says yes and nobody waits).
	raw syscall.RawConn
	// idle fails a read or wait that has had nothing for this long.
	idle time.Duration

	readMu sync.Mutex
	// ahead holds the byte Buffered read to learn that data was waiting.
	ahead     [1]byte
	haveAhead bool
	// The data frame being read: payload bytes left, its mask and where
	// in it the next byte is; inMessage while a fragmented message goes
	// on; msgSize counts the message's bytes against MaxMessageSize.
	remaining uint64
	mask      [4]byte
	maskPos   int
	inMessage bool
	msgSize   uint64
	// readErr ends reading for good once set.
	readErr error
}

// NewHubConn wraps the agent's upgraded websocket; reads that wait longer
// than idle fail (the hub does not ping: it hears the agent's pings, so a
// silent peer is a dead one).
//
// The upgrader must have a ReadBufferSize: with none, gorilla reads
// through the HTTP server's buffer, and bytes the agent sent right after
// its request would wait there, unseen by a HubConn, which reads the
// connection beneath. With one, gorilla hands such bytes over with the
// connection (wrapped; then the HubConn just never waits without reading).
func NewHubConn(ws *websocket.Conn, idle time.Duration) *HubConn {
	c := &HubConn{wsWriter: wsWriter{ws: ws}, tls: ws.NetConn(), idle: idle}
	if tc, ok := c.tls.(*tls.Conn); ok && canPeek {
		if sc, ok := tc.NetConn().(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				c.raw = rc
			}
		}
	}
	return c
}

// Buffered tells whether a Read would find data without waiting: data
// read ahead here, decrypted or received by crypto/tls and not yet read,
// or in the socket. It learns what crypto/tls holds by reading a byte with
// the deadline passed, which crypto/tls survives (a Go release that
// changes this fails TestCryptoTLSSurvivesReadPastDeadline); the byte is
// kept for the next Read. The socket it peeks.
// On a connection it cannot wait on, it always says yes.
func (c *HubConn) Buffered() (bool, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.raw == nil || c.haveAhead {
		return true, nil
	}
	if c.readErr != nil {
		return false, c.readErr
	}
	_ = c.tls.SetReadDeadline(time.Unix(1, 0))
	n, err := c.tls.Read(c.ahead[:])
	c.resetReadDeadline()
	if n == 1 {
		c.haveAhead = true
		return true, nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Nothing above the socket. Data in it is as good: under traffic
		// the next read finds it, without a hand-off to a waiter.
		inSocket := false
		if cerr := c.raw.Control(func(fd uintptr) { inSocket = peekReadable(fd) }); cerr != nil {
			return false, cerr
		}
		return inSocket, nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	c.readErr = err
	return false, err
}

// WaitReadable blocks until the socket has data (or its end), without
// reading it, or fails once nothing has come for the idle timeout or the
// connection is closed. Call it when Buffered says no.
func (c *HubConn) WaitReadable() error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.raw == nil || c.haveAhead {
		return nil
	}
	c.resetReadDeadline()
	return c.raw.Read(peekReadable)
}

// Read returns the payload of the agent's binary messages as one stream.
// Pings are answered, pongs ignored; a normal close ends the stream (EOF),
// any other close or a frame that breaks the protocol fails it.
func (c *HubConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	if c.readErr != nil {
		return 0, c.readErr
	}
	c.resetReadDeadline()
	// Any error ends reading for good, a timeout too: it may fall inside a
	// frame header, and the hub ends a session that timed out anyway.
	for c.remaining == 0 {
		if err := c.nextFrame(); err != nil {
			c.readErr = err
			return 0, err
		}
	}
	if uint64(len(p)) > c.remaining {
		p = p[:c.remaining]
	}
	n, err := c.readRaw(p)
	c.unmask(p[:n])
	c.remaining -= uint64(n)
	if err != nil {
		c.readErr = err
	}
	return n, err
}

// resetReadDeadline gives the next read or wait the idle timeout, or none.
func (c *HubConn) resetReadDeadline() {
	var t time.Time
	if c.idle > 0 {
		t = time.Now().Add(c.idle)
	}
	_ = c.tls.SetReadDeadline(t)
}

// maxControlPayload is RFC 6455's bound on a control frame's payload.
const maxControlPayload = 125

// nextFrame reads frame headers until a data frame with payload begins,
// handling the control frames met on the way.
func (c *HubConn) nextFrame() error {
	var hdr [14]byte
	if _, err := c.readFull(hdr[:2]); err != nil {
		return err
	}
	fin, rsv, opcode := hdr[0]&0x80 != 0, hdr[0]&0x70, int(hdr[0]&0x0f)
	masked, length := hdr[1]&0x80 != 0, uint64(hdr[1]&0x7f)
	switch {
	case rsv != 0:
		return c.protocolError("reserved bits set (no extension was agreed)")
	case !masked:
		return c.protocolError("unmasked frame from a client")
	}
	switch length {
	case 126:
		if _, err := c.readFull(hdr[2:4]); err != nil {
			return err
		}
		length = uint64(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		if _, err := c.readFull(hdr[2:10]); err != nil {
			return err
		}
		length = binary.BigEndian.Uint64(hdr[2:10])
	}
	if _, err := c.readFull(c.mask[:]); err != nil {
		return err
	}
	c.maskPos = 0
	switch opcode {
	case websocket.BinaryMessage, websocket.TextMessage, 0:
		switch {
		case opcode == websocket.TextMessage:
			return c.protocolError("text message (the session speaks binary)")
		case opcode == 0 && !c.inMessage:
			return c.protocolError("continuation frame outside a message")
		case opcode != 0 && c.inMessage:
			return c.protocolError("new message inside a fragmented one")
		case opcode != 0:
			c.msgSize = 0
		}
		if length > MaxMessageSize-c.msgSize {
			c.readErr = errors.New("transport: websocket message larger than the limit")
			c.closeWith(websocket.CloseMessageTooBig, "message too big")
			return c.readErr
		}
		c.msgSize += length
		c.inMessage = !fin
		c.remaining = length
		return nil
	case websocket.CloseMessage, websocket.PingMessage, websocket.PongMessage:
		if !fin || length > maxControlPayload {
			return c.protocolError("fragmented or oversized control frame")
		}
		payload := make([]byte, length)
		if _, err := c.readFull(payload); err != nil {
			return err
		}
		c.unmask(payload)
		return c.control(opcode, payload)
	default:
		return c.protocolError(fmt.Sprintf("opcode %d", opcode))
	}
}

// control handles a control frame's payload.
func (c *HubConn) control(opcode int, payload []byte) error {
	switch opcode {
	case websocket.PingMessage:
		err := c.ws.WriteControl(websocket.PongMessage, payload, time.Now().Add(WriteTimeout))
		if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
			return err
		}
		return nil
	case websocket.CloseMessage:
		code := websocket.CloseNoStatusReceived
		switch {
		case len(payload) == 1:
			return c.protocolError("close frame with a 1-byte payload")
		case len(payload) >= 2:
			code = int(binary.BigEndian.Uint16(payload))
		}
		if code == websocket.CloseNormalClosure || code == websocket.CloseNoStatusReceived {
			return io.EOF
		}
		return &websocket.CloseError{Code: code, Text: string(payload[min(2, len(payload)):])}
	}
	return nil // a pong
}

func (c *HubConn) protocolError(what string) error {
	c.closeWith(websocket.CloseProtocolError, what)
	return fmt.Errorf("transport: websocket protocol error: %s", what)
}

func (c *HubConn) closeWith(code int, text string) {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// readRaw reads the byte Buffered read ahead, if any, else from TLS.
func (c *HubConn) readRaw(p []byte) (int, error) {
	if c.haveAhead {
		p[0] = c.ahead[0]
		c.haveAhead = false
		return 1, nil
	}
	return c.tls.Read(p)
}

func (c *HubConn) readFull(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.readRaw(p[n:])
		n += m
		if err != nil {
			if errors.Is(err, io.EOF) && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
	}
	return n, nil
}

func (c *HubConn) unmask(b []byte) {
	for i := range b {
		b[i] ^= c.mask[c.maskPos&3]
		c.maskPos++
	}
}

// SetDeadline sets the read and write deadlines.
func (c *HubConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}

// SetReadDeadline sets the deadline of reads from the agent.
func (c *HubConn) SetReadDeadline(t time.Time) error { return c.tls.SetReadDeadline(t) }
