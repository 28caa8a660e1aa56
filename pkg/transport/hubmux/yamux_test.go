package hubmux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

func TestNewKinds(t *testing.T) {
	for kind, want := range map[string]string{"": "*hubmux.Session", KindHubmux: "*hubmux.Session", KindYamux: "*hubmux.yamuxMux"} {
		hubConn, _ := tcpPair(t)
		m, err := New(kind, hubConn, Config{})
		if err != nil {
			t.Fatalf("New(%q): %v", kind, err)
		}
		if got := fmt.Sprintf("%T", m); got != want {
			t.Errorf("New(%q) is a %s, want a %s", kind, got, want)
		}
		_ = m.Close()
	}
	hubConn, _ := tcpPair(t)
	if _, err := New("smux", hubConn, Config{}); err == nil {
		t.Error("New accepted an unknown kind")
	}
	if err := CheckKind("smux"); err == nil {
		t.Error("CheckKind accepted an unknown kind")
	}
}

func frameBytes(typ uint8, flags uint16, id uint32, data string) []byte {
	var h header
	length := uint32(len(data))
	if typ != typeData {
		length = 0
	}
	h.encode(typ, flags, id, length)
	return append(h[:], data...)
}

// The refuser under a KindYamux session hides a stream the agent opens
// after its first from yamux, and resets it only between two of the
// frames yamux writes, never inside one.
func TestStreamRefuserResetsBetweenFrames(t *testing.T) {
	hubConn, agent := tcpPair(t)
	refused := 0
	r := newStreamRefuser(hubConn, func() { refused++ })

	// yamux has written a frame's header, not yet its payload.
	tunnelHeader := frameBytes(typeData, 0, 2, "body")[:headerSize]
	if _, err := r.Write(tunnelHeader); err != nil {
		t.Fatal(err)
	}
	kept := [][]byte{
		frameBytes(typeWindowUpdate, flagSYN, 1, ""),
		frameBytes(typeData, 0, 1, "hi"),
		frameBytes(typeData, 0, 3, "more"), // for the refused stream: yamux drops it
		frameBytes(typeData, 0, 1, "yo"),
	}
	sent := bytes.Join([][]byte{kept[0], kept[1], frameBytes(typeData, flagSYN, 3, "let me in"), kept[2], kept[3]}, nil)
	if _, err := agent.Write(sent); err != nil {
		t.Fatal(err)
	}
	want := bytes.Join(kept, nil)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("yamux read\n%x\nwant\n%x", got, want)
	}
	if refused != 1 {
		t.Fatalf("OnRefusedStream called %d times, want 1", refused)
	}

	// The reset waits for the payload.
	_ = agent.SetReadDeadline(time.Now().Add(10 * time.Second))
	head := make([]byte, headerSize)
	if _, err := io.ReadFull(agent, head); err != nil || !bytes.Equal(head, tunnelHeader) {
		t.Fatalf("the agent read %x, %v; want the tunnel frame's header", head, err)
	}
	_ = agent.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := agent.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the agent read %d bytes inside yamux's frame (%v)", n, err)
	}
	if _, err := r.Write([]byte("body")); err != nil {
		t.Fatal(err)
	}
	want = append([]byte("body"), frameBytes(typeWindowUpdate, flagRST, 3, "")...)
	got = make([]byte, len(want))
	_ = agent.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(agent, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the agent read %x, %v; want the payload, then the reset: %x", got, err, want)
	}

	// At a frame's end the reset goes at once.
	if _, err := agent.Write(frameBytes(typeWindowUpdate, flagSYN, 5, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Write(frameBytes(typeWindowUpdate, 0, 1, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, headerSize)); err != nil {
		t.Fatal(err)
	}
	got = make([]byte, headerSize)
	if _, err := io.ReadFull(agent, got); err != nil || !bytes.Equal(got, frameBytes(typeWindowUpdate, flagRST, 5, "")) {
		t.Fatalf("the agent read %x, %v; want the reset of stream 5", got, err)
	}

	// A stream with a hub's id ends the session.
	if _, err := agent.Write(frameBytes(typeWindowUpdate, flagSYN, 4, "")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 64)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("read after a SYN with an even id: %v, want ErrProtocol", err)
	}
}
