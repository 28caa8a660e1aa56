package hubmux

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/pkg/transport"
)

// forEachKind runs a test against each kind of Mux: what the gateway
// relies on holds for both.
func forEachKind(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range Kinds() {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// errYamuxEnded is what pair reports when a KindYamux session ends:
// yamux does not tell why.
var errYamuxEnded = errors.New("the yamux session ended")

// pair connects a hub session of the given kind (served) to an agent's
// hashicorp/yamux client as in the hub: over a TLS websocket, the hub's
// end a transport.HubConn (so a KindHubmux session hands itself between
// goroutines, waiting for data on the socket when idle), the agent's the
// real yamux it runs. served receives why the session ended (Serve's
// error; errYamuxEnded for KindYamux).
func pair(t *testing.T, kind string, cfg Config) (hub Mux, agent *yamux.Session, served chan error) {
	t.Helper()
	return pairIdle(t, kind, cfg, time.Minute, true)
}

// pairIdle is pair with the hub's idle timeout and the agent's keepalive
// pings chosen.
func pairIdle(t *testing.T, kind string, cfg Config, idle time.Duration, keepAlive bool) (Mux, *yamux.Session, chan error) {
	t.Helper()
	conns := make(chan *transport.HubConn, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{ReadBufferSize: 128}).Upgrade(w, r, nil) // as the hub's (NewHubConn)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- transport.NewHubConn(ws, idle)
	}))
	t.Cleanup(srv.Close)
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}
	ws, _, err := d.Dial("wss"+strings.TrimPrefix(srv.URL, "https"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := New(kind, <-conns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	if s, ok := hub.(*Session); ok {
		go func() { served <- s.Serve() }()
	} else {
		hub.Start()
		go func() {
			<-hub.Done()
			served <- errYamuxEnded
		}()
	}
	yc := yamux.DefaultConfig()
	yc.LogOutput = io.Discard
	yc.KeepAliveInterval = time.Second
	yc.EnableKeepAlive = keepAlive
	agent, err := yamux.Client(transport.NewConn(ws), yc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Close(); _ = hub.Close() })
	return hub, agent, served
}

// tcpPair returns the accepted end first.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	client, server := testkit.TCPPair(t)
	return server, client
}

func accept(t *testing.T, hub Mux) ControlStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := hub.AcceptControl(ctx)
	if err != nil {
		t.Fatalf("accepting the control stream: %v", err)
	}
	return st
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// Four windows each way: without window updates in both directions the
// transfer stalls after the first 256 KiB.
func TestControlStreamCarriesMoreThanAWindowBothWays(t *testing.T) {
	forEachKind(t, testControlStreamCarriesMoreThanAWindowBothWays)
}

func testControlStreamCarriesMoreThanAWindowBothWays(t *testing.T, kind string) {
	hub, agent, _ := pair(t, kind, Config{})
	ctrl, err := agent.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	up, down := random(t, 4*window+123), random(t, 4*window+321)
	go func() { _, _ = ctrl.Write(up) }()
	st := accept(t, hub)
	_ = st.SetReadDeadline(time.Now().Add(20 * time.Second))
	got := make([]byte, len(up))
	if _, err := io.ReadFull(st, got); err != nil {
		t.Fatalf("hub reading: %v", err)
	}
	if !bytes.Equal(got, up) {
		t.Fatal("hub read other bytes than the agent wrote")
	}
	go func() { _, _ = st.Write(down) }()
	_ = ctrl.SetReadDeadline(time.Now().Add(20 * time.Second))
	got = make([]byte, len(down))
	if _, err := io.ReadFull(ctrl, got); err != nil {
		t.Fatalf("agent reading: %v", err)
	}
	if !bytes.Equal(got, down) {
		t.Fatal("agent read other bytes than the hub wrote")
	}
}

// Between messages the control stream holds no buffer, and nobody reads it
// until the notify function says there is something to read.
func TestIdleControlStreamKeepsNoBufferAndNotifies(t *testing.T) {
	forEachKind(t, testIdleControlStreamKeepsNoBufferAndNotifies)
}

func testIdleControlStreamKeepsNoBufferAndNotifies(t *testing.T, kind string) {
	hub, agent, _ := pair(t, kind, Config{})
	ctrl, err := agent.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ctrl.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	st := accept(t, hub)
	notified := make(chan struct{}, 16)
	st.SetNotify(func() { notified <- struct{}{} })
	for !st.ReadReady() {
		time.Sleep(time.Millisecond)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q %v", buf, err)
	}
	kept := keptBuffer(st)
	if kept != nil || st.ReadReady() {
		t.Fatalf("after reading everything the stream keeps a %d-byte buffer (ready %v)", cap(kept), st.ReadReady())
	}
	for len(notified) > 0 {
		<-notified // for "hello"
	}
	if _, err := ctrl.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification for data that arrived")
	}
	if !st.ReadReady() {
		t.Fatal("notified, but a read would block")
	}
	_ = agent.Close()
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification when the session ended")
	}
	// What arrived before the end is still read, then EOF.
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "again" {
		t.Fatalf("read %q %v", buf, err)
	}
	if _, err := st.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the end: %v", err)
	}
}

// keptBuffer is the buffer a control stream keeps for data not read yet.
func keptBuffer(st ControlStream) []byte {
	switch st := st.(type) {
	case *Stream:
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.buf
	case *yamuxControl:
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.buf
	}
	panic(fmt.Sprintf("a control stream of type %T", st))
}

// The agent's keepalive pings are answered; between them a KindHubmux
// session waits on the socket, outside the TLS read path.
func TestPingsAreAnswered(t *testing.T) {
	forEachKind(t, testPingsAreAnswered)
}

func testPingsAreAnswered(t *testing.T, kind string) {
	_, agent, _ := pair(t, kind, Config{})
	for range 3 {
		if _, err := agent.Ping(); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	if kind == KindHubmux {
		waitParked(t, true)
	}
	if _, err := agent.Ping(); err != nil {
		t.Fatalf("ping after waiting: %v", err)
	}
}

// waitParked waits until a session's goroutine waits on the socket
// (parked) or none does (!parked).
func waitParked(t *testing.T, parked bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		dump := string(buf[:runtime.Stack(buf, true)])
		waiting := false
		for _, g := range strings.Split(dump, "\n\n") {
			if strings.Contains(g, "hubmux.(*Session).awaitData") && strings.Contains(g, "WaitReadable") && !strings.Contains(g, "crypto/tls") {
				waiting = true
			}
		}
		if waiting == parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a session waiting on the socket: %v, want %v:\n%s", waiting, parked, dump)
		}
	}
}

// Closing a session that waits on the socket ends it and (KindHubmux) its
// goroutine.
func TestCloseWhileWaiting(t *testing.T) {
	forEachKind(t, testCloseWhileWaiting)
}

func testCloseWhileWaiting(t *testing.T, kind string) {
	hub, _, served := pair(t, kind, Config{})
	if kind == KindHubmux {
		waitParked(t, true)
	}
	_ = hub.Close()
	select {
	case err := <-served:
		if kind == KindHubmux && !errors.Is(err, ErrSessionClosed) {
			t.Fatalf("Serve: %v, want ErrSessionClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running after Close")
	}
	if kind == KindHubmux {
		waitParked(t, false)
	}
}

// A silent agent's session ends when the hub's idle timeout passes while
// it waits on the socket.
func TestSilentAgentTimesOut(t *testing.T) {
	forEachKind(t, testSilentAgentTimesOut)
}

func testSilentAgentTimesOut(t *testing.T, kind string) {
	_, _, served := pairIdle(t, kind, Config{}, 300*time.Millisecond, false)
	select {
	case err := <-served:
		if kind == KindHubmux && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Serve: %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a silent session outlived the idle timeout")
	}
}

// Streams the hub opens (tunnels) work concurrently, in both directions,
// with the half-close yamux has: the hub's Close ends its direction and it
// still reads the agent's answer; when both ends closed, the stream is
// forgotten.
func TestStreamsOpenedByTheHub(t *testing.T) {
	forEachKind(t, testStreamsOpenedByTheHub)
}

func testStreamsOpenedByTheHub(t *testing.T, kind string) {
	hub, agent, _ := pair(t, kind, Config{})
	go func() {
		for {
			st, err := agent.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				b, _ := io.ReadAll(st)
				_, _ = st.Write(bytes.ToUpper(b))
				_ = st.Close()
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			st, err := hub.OpenTunnel()
			if err != nil {
				errs <- err
				return
			}
			_ = st.SetDeadline(time.Now().Add(30 * time.Second))
			msg := strings.Repeat(string(rune('a'+i)), window+1000*i)
			if _, err := st.Write([]byte(msg)); err != nil {
				errs <- err
				return
			}
			if err := st.Close(); err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(st)
			if err != nil {
				errs <- err
				return
			}
			if string(got) != strings.ToUpper(msg) {
				errs <- errors.New("wrong echo")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := numStreams(hub); n != 0 {
		t.Errorf("%d streams still known after both ends closed them all", n)
	}
}

// numStreams is the number of streams a session knows.
func numStreams(hub Mux) int {
	return hub.(interface{ NumStreams() int }).NumStreams()
}

// Any stream the agent opens after the control stream is reset at once,
// its data dropped, and the control stream goes on.
func TestFurtherStreamsFromTheAgentAreReset(t *testing.T) {
	forEachKind(t, testFurtherStreamsFromTheAgentAreReset)
}

func testFurtherStreamsFromTheAgentAreReset(t *testing.T, kind string) {
	var refused atomic.Int32
	hub, agent, _ := pair(t, kind, Config{OnRefusedStream: func() { refused.Add(1) }})
	ctrl, err := agent.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st := accept(t, hub)
	for i := range 3 {
		extra, err := agent.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = extra.Write([]byte("let me in"))
		_ = extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := extra.Read(make([]byte, 8)); !errors.Is(err, yamux.ErrConnectionReset) {
			t.Fatalf("stream %d opened by the agent: read %v, want a reset", i, err)
		}
	}
	if n := refused.Load(); n != 3 {
		t.Errorf("OnRefusedStream called %d times, want 3", n)
	}
	if _, err := ctrl.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	_ = st.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "ok" {
		t.Fatalf("control stream after the refusals: %q %v", buf, err)
	}
}

func TestDeadlines(t *testing.T) {
	forEachKind(t, testDeadlines)
}

func testDeadlines(t *testing.T, kind string) {
	hub, agent, _ := pair(t, kind, Config{})
	if _, err := agent.OpenStream(); err != nil {
		t.Fatal(err)
	}
	st := accept(t, hub)
	_ = st.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	var ne net.Error
	if _, err := st.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline is not a net.Error timeout: %v", err)
	}
	// A deadline set while a read waits wakes it.
	_ = st.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = st.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("woken read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a new deadline did not wake the waiting read")
	}

	// A write waiting for window the agent never gives (nobody reads
	// the tunnel there) ends at its deadline.
	tun, err := hub.OpenTunnel()
	if err != nil {
		t.Fatal(err)
	}
	_ = tun.SetWriteDeadline(time.Now().Add(time.Second))
	n, err := tun.Write(make([]byte, 2*window))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != window {
		t.Fatalf("write beyond the window: %d bytes, %v; want %d and the deadline", n, err, window)
	}
}

// A stream closed here whose peer never closes its end is reset after
// CloseTimeout, so it cannot pin memory. (A KindYamux stream then reads
// io.EOF: yamux closes it rather than marking it reset.)
func TestHalfClosedStreamIsResetAfterCloseTimeout(t *testing.T) {
	forEachKind(t, testHalfClosedStreamIsResetAfterCloseTimeout)
}

func testHalfClosedStreamIsResetAfterCloseTimeout(t *testing.T, kind string) {
	hub, agent, _ := pair(t, kind, Config{CloseTimeout: 100 * time.Millisecond})
	st, err := hub.OpenTunnel()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := agent.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("agent's read after the hub's FIN: %v", err)
	}
	for numStreams(hub) != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	want := ErrStreamReset
	if kind == KindYamux {
		want = io.EOF
	}
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, want) {
		t.Fatalf("hub's read after the close timeout: %v, want %v", err, want)
	}
}

// The end of the session ends every stream: blocked reads return EOF and
// writes fail; Serve returns.
func TestSessionEndEndsStreams(t *testing.T) {
	forEachKind(t, testSessionEndEndsStreams)
}

func testSessionEndEndsStreams(t *testing.T, kind string) {
	hub, agent, served := pair(t, kind, Config{})
	if _, err := agent.OpenStream(); err != nil {
		t.Fatal(err)
	}
	st := accept(t, hub)
	read := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		read <- err
	}()
	_ = agent.Close()
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running after the agent closed")
	}
	if err := <-read; !errors.Is(err, io.EOF) {
		t.Fatalf("blocked read: %v", err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("write after the end: %v", err)
	}
	if _, err := hub.OpenTunnel(); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("open after the end: %v", err)
	}
	<-hub.Done()
}

// Frames that break the protocol end the session with ErrProtocol.
func TestProtocolErrors(t *testing.T) {
	frame := func(version, typ uint8, flags uint16, id, length uint32, data int) []byte {
		b := make([]byte, headerSize+data)
		b[0], b[1] = version, typ
		binary.BigEndian.PutUint16(b[2:], flags)
		binary.BigEndian.PutUint32(b[4:], id)
		binary.BigEndian.PutUint32(b[8:], length)
		return b
	}
	syn := frame(0, typeWindowUpdate, flagSYN, 1, 0, 0)
	for name, in := range map[string][]byte{
		"bad version":       frame(1, typePing, flagSYN, 0, 1, 0),
		"bad type":          frame(0, 9, 0, 0, 0, 0),
		"window overrun":    append(syn, frame(0, typeData, 0, 1, window+1, 0)...),
		"hub's stream id":   frame(0, typeWindowUpdate, flagSYN, 2, 0, 0),
		"stream twice":      append(syn, syn...),
		"protocol go-away":  frame(0, typeGoAway, 0, 0, goAwayProtoErr, 0),
		"huge frame, no id": frame(0, typeData, 0, 99, window+1, 0),
	} {
		t.Run(name, func(t *testing.T) {
			hubConn, raw := tcpPair(t)
			defer raw.Close()
			hub := Server(hubConn, Config{})
			served := make(chan error, 1)
			go func() { served <- hub.Serve() }()
			go func() { _, _ = io.Copy(io.Discard, raw) }()
			if _, err := raw.Write(in); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-served:
				if name != "protocol go-away" && !errors.Is(err, ErrProtocol) {
					t.Fatalf("Serve: %v, want a protocol error", err)
				}
				if err == nil {
					t.Fatal("Serve returned nil")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the session goes on")
			}
		})
	}
}
