package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// hubConnPair upgrades a real TLS websocket, gorilla's client on one end
// and a HubConn with the given idle timeout on the other.
func hubConnPair(t *testing.T, idle time.Duration) (*HubConn, *websocket.Conn) {
	t.Helper()
	return hubConnPairVia(t, idle, nil)
}

// hubConnPairVia is hubConnPair with the agent's TCP connection wrapped.
func hubConnPairVia(t *testing.T, idle time.Duration, wrap func(net.Conn) net.Conn) (*HubConn, *websocket.Conn) {
	t.Helper()
	conns := make(chan *HubConn, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{ReadBufferSize: 128}).Upgrade(w, r, nil) // as the hub's (NewHubConn)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- NewHubConn(ws, idle)
	}))
	t.Cleanup(srv.Close)
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}
	if wrap != nil {
		d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wrap(c), nil
		}
	}
	agent, _, err := d.Dial("wss"+strings.TrimPrefix(srv.URL, "https"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hub := <-conns
	t.Cleanup(func() { _ = agent.Close(); _ = hub.Close() })
	return hub, agent
}

func expectBuffered(t *testing.T, c *HubConn, want bool) {
	t.Helper()
	got, err := c.Buffered()
	if err != nil {
		t.Fatalf("Buffered: %v", err)
	}
	if got != want {
		t.Fatalf("Buffered %v, want %v", got, want)
	}
}

// The agent's binary messages, small, large and fragmented, read back as
// one stream; between them the hub can tell nothing waits above the
// socket, and wait for the socket without reading; data already inside
// TLS counts as waiting.
func TestHubConnReadsMessagesAndWaitsWithoutReading(t *testing.T) {
	if !canPeek {
		t.Skip("this system cannot wait on a socket without reading")
	}
	hub, agent := hubConnPair(t, time.Minute)
	expectBuffered(t, hub, false)

	big := make([]byte, 300<<10)
	_, _ = rand.Read(big)
	want := append([]byte("hello"), big...)
	go func() {
		_ = agent.WriteMessage(websocket.BinaryMessage, []byte("hello"))
		// Fragmented: NextWriter flushes a frame each time its buffer fills.
		w, err := agent.NextWriter(websocket.BinaryMessage)
		if err == nil {
			_, _ = w.Write(big)
			_ = w.Close()
		}
	}()
	if err := hub.WaitReadable(); err != nil {
		t.Fatalf("WaitReadable: %v", err)
	}
	expectBuffered(t, hub, true) // in the socket
	got := make([]byte, len(want))
	if _, err := io.ReadFull(hub, got); err != nil {
		t.Fatalf("reading: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the stream read differs from the messages written")
	}
	expectBuffered(t, hub, false)

	// Nothing arrives: the wait goes on.
	waited := make(chan error, 1)
	go func() { waited <- hub.WaitReadable() }()
	select {
	case err := <-waited:
		t.Fatalf("WaitReadable returned with nothing sent: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	// A message arrives: the wait is over.
	go func() { _ = agent.WriteMessage(websocket.BinaryMessage, []byte("onetwo")) }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitReadable: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReadable still waits after data arrived")
	}
	// Half of it read: the rest is inside TLS, decrypted, and counts as
	// waiting (Buffered reads a byte of it ahead, which Read returns).
	got = make([]byte, 3)
	if _, err := io.ReadFull(hub, got); err != nil || string(got) != "one" {
		t.Fatalf("read %q, %v; want \"one\"", got, err)
	}
	expectBuffered(t, hub, true)
	if _, err := io.ReadFull(hub, got); err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v; want \"two\"", got, err)
	}
	expectBuffered(t, hub, false)
}

// splitConn, once armed, holds one write back and sends it with the
// first 5 bytes of the next, then the rest of that a moment later: a TLS
// record arrives whole together with the start of the next one.
type splitConn struct {
	net.Conn
	armed atomic.Bool
	held  []byte
	// rest is closed just before the rest is sent.
	rest chan struct{}
}

func (c *splitConn) Write(p []byte) (int, error) {
	if !c.armed.Load() {
		return c.Conn.Write(p)
	}
	if c.held == nil {
		c.held = append([]byte(nil), p...)
		return len(p), nil
	}
	c.armed.Store(false)
	if _, err := c.Conn.Write(append(c.held, p[:5]...)); err != nil {
		return 0, err
	}
	time.Sleep(300 * time.Millisecond)
	close(c.rest)
	if _, err := c.Conn.Write(p[5:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// A record that has half arrived, kept inside TLS, is not data waiting:
// the hub waits on the socket for the rest, and wakes when it comes.
func TestHubConnWaitsForTheRestOfARecord(t *testing.T) {
	if !canPeek {
		t.Skip("this system cannot wait on a socket without reading")
	}
	var split *splitConn
	hub, agent := hubConnPairVia(t, time.Minute, func(c net.Conn) net.Conn {
		split = &splitConn{Conn: c, rest: make(chan struct{})}
		return split
	})
	split.armed.Store(true)
	go func() {
		_ = agent.WriteMessage(websocket.BinaryMessage, []byte("first"))
		_ = agent.WriteMessage(websocket.BinaryMessage, []byte("second"))
	}()
	if err := hub.WaitReadable(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(hub, got); err != nil || string(got) != "first" {
		t.Fatalf("read %q, %v; want \"first\"", got, err)
	}
	expectBuffered(t, hub, false) // 5 bytes of the next record, in TLS
	if err := hub.WaitReadable(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-split.rest:
	default:
		t.Error("WaitReadable returned before the rest of the record was sent")
	}
	got = make([]byte, 6)
	if _, err := io.ReadFull(hub, got); err != nil || string(got) != "second" {
		t.Fatalf("read %q, %v; want \"second\"", got, err)
	}
}

// Pings are answered with their payload; a normal close ends the stream.
func TestHubConnAnswersPingsAndEndsOnClose(t *testing.T) {
	hub, agent := hubConnPair(t, time.Minute)
	pongs := make(chan string, 1)
	agent.SetPongHandler(func(s string) error { pongs <- s; return nil })
	go func() {
		for {
			if _, _, err := agent.ReadMessage(); err != nil {
				return
			}
		}
	}()
	if err := agent.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	_ = agent.WriteMessage(websocket.BinaryMessage, []byte("x"))
	b := make([]byte, 1)
	if _, err := io.ReadFull(hub, b); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-pongs:
		if p != "are you there" {
			t.Fatalf("pong %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no pong")
	}
	_ = agent.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	if _, err := hub.Read(b); !errors.Is(err, io.EOF) {
		t.Fatalf("read after a normal close: %v, want EOF", err)
	}
}

// A silent agent fails the wait after the idle timeout.
func TestHubConnWaitTimesOut(t *testing.T) {
	hub, _ := hubConnPair(t, 300*time.Millisecond)
	var err error
	if canPeek {
		err = hub.WaitReadable()
	} else {
		_, err = hub.Read(make([]byte, 1))
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the idle timeout: %v, want a deadline error", err)
	}
}

// frame builds a client frame; masked unless told otherwise.
func frame(fin bool, opcode byte, payload []byte, unmasked bool) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	mask := byte(0x80)
	if unmasked {
		mask = 0
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, mask|byte(n))
	case n <= 0xffff:
		out = append(out, mask|126, byte(n>>8), byte(n))
	default:
		out = append(out, mask|127)
		out = binary.BigEndian.AppendUint64(out, uint64(n))
	}
	if unmasked {
		return append(out, payload...)
	}
	key := []byte{1, 2, 3, 4}
	out = append(out, key...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

// Frames that break RFC 6455, or the session's own rules, fail reading
// and close the websocket with a reason; nothing after them is read.
func TestHubConnRejectsBadFrames(t *testing.T) {
	huge := make([]byte, 0, 14)
	huge = append(huge, 0x82, 0x80|127)
	huge = binary.BigEndian.AppendUint64(huge, 1<<40)
	huge = append(huge, 1, 2, 3, 4)
	for name, in := range map[string][]byte{
		"unmasked":               frame(true, 2, []byte("x"), true),
		"text":                   frame(true, 1, []byte("x"), false),
		"reserved bit":           append([]byte{0xc2}, frame(true, 2, []byte("x"), false)[1:]...),
		"continuation first":     frame(true, 0, []byte("x"), false),
		"message in a message":   append(frame(false, 2, []byte("x"), false), frame(true, 2, []byte("y"), false)...),
		"fragmented ping":        frame(false, 9, nil, false),
		"oversized close":        frame(true, 8, make([]byte, 126), false),
		"unknown opcode":         frame(true, 3, nil, false),
		"message over the limit": huge,
		"fragments over the limit": append(frame(false, 2, make([]byte, MaxMessageSize/2+1), false),
			frame(true, 0, make([]byte, MaxMessageSize/2), false)...),
		"close going away": frame(true, 8, websocket.FormatCloseMessage(websocket.CloseGoingAway, "bye"), false),
	} {
		t.Run(name, func(t *testing.T) {
			hub, agent := hubConnPair(t, time.Minute)
			go func() {
				_, _ = agent.NetConn().Write(in)
				_, _ = agent.NetConn().Write(frame(true, 2, []byte("after"), false))
			}()
			got, err := io.ReadAll(hub)
			if err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("read %d bytes and no error", len(got))
			}
			if bytes.Contains(got, []byte("after")) {
				t.Fatal("a frame after the bad one was read")
			}
			if _, err := hub.Read(make([]byte, 1)); err == nil {
				t.Fatal("a read after the failure succeeded")
			}
		})
	}
}

// An idle HubConn's waiter parks a few frames deep: the point of it.
func TestHubConnWaiterParksShallow(t *testing.T) {
	if !canPeek {
		t.Skip("this system cannot wait on a socket without reading")
	}
	hub, _ := hubConnPair(t, time.Minute)
	go func() { _ = hub.WaitReadable() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		dump := string(buf[:runtime.Stack(buf, true)])
		for _, g := range strings.Split(dump, "\n\n") {
			if !strings.Contains(g, "(*HubConn).WaitReadable") {
				continue
			}
			if strings.Contains(g, "crypto/tls") {
				t.Fatalf("the waiter is inside crypto/tls:\n%s", g)
			}
			if frames := strings.Count(g, "\n\t"); frames > 12 {
				t.Fatalf("the waiter is %d frames deep:\n%s", frames, g)
			}
			if strings.Contains(g, "IO wait") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter parked on the socket:\n%s", dump)
		}
	}
}
