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
	ws *websocket.Conn

	readMu sync.Mutex
	reader io.Reader

	writeMu sync.Mutex
}

// NewConn wraps ws as a net.Conn and bounds the size of incoming messages.
func NewConn(ws *websocket.Conn) net.Conn {
	ws.SetReadLimit(MaxMessageSize)
	return &wsConn{ws: ws}
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

func (c *wsConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	// Every write is bounded: a peer that stops reading must not hold the
	// writer (and with it yamux's Close) for ever.
	_ = c.ws.SetWriteDeadline(time.Now().Add(WriteTimeout))
	if err := c.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close does not take writeMu: a writer stuck on a dead peer must not keep
// the connection open. gorilla allows WriteControl concurrently with writers.
func (c *wsConn) Close() error {
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return c.ws.Close()
}

func (c *wsConn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}
func (c *wsConn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *wsConn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
