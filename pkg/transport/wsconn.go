package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// MaxMessageSize bounds one websocket message. yamux never writes more
// than a header plus one window's worth (256 KiB by default) at once.
const MaxMessageSize = 512 << 10

// wsConn adapts a websocket to net.Conn: writes become binary messages,
// reads stream through consecutive messages. It is the agent's end; the
// hub's is HubConn.
type wsConn struct {
	wsWriter

	readMu sync.Mutex
	reader io.Reader
}

// NewConn wraps ws as a net.Conn and bounds the size of incoming messages.
func NewConn(ws *websocket.Conn) net.Conn {
	ws.SetReadLimit(MaxMessageSize)
	return &wsConn{wsWriter: wsWriter{ws: ws}}
}

func (c *wsConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for {
		if c.reader == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) && ce.Code == websocket.CloseNormalClosure {
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.BinaryMessage {
				return 0, errors.New("transport: unexpected non-binary websocket message")
			}
			c.reader = r
		}
		n, err := c.reader.Read(p)
		if errors.Is(err, io.EOF) {
			c.reader = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

// wsWriter is the writing half of both ends (wsConn, HubConn): each Write
// is one binary message.
type wsWriter struct {
	ws      *websocket.Conn
	writeMu sync.Mutex
}

func (w *wsWriter) Write(p []byte) (int, error) {
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	// Every write is bounded: a peer that stops reading must not hold the
	// writer (and with it the session's close) for ever.
	_ = w.ws.SetWriteDeadline(time.Now().Add(WriteTimeout))
	if err := w.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close sends a normal close and closes the connection. It does not take
// writeMu: a writer stuck on a dead peer must not keep the connection
// open (gorilla allows WriteControl concurrently with writers).
func (w *wsWriter) Close() error {
	_ = w.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return w.ws.Close()
}

func (w *wsWriter) LocalAddr() net.Addr                { return w.ws.LocalAddr() }
func (w *wsWriter) RemoteAddr() net.Addr               { return w.ws.RemoteAddr() }
func (w *wsWriter) SetWriteDeadline(t time.Time) error { return w.ws.SetWriteDeadline(t) }
