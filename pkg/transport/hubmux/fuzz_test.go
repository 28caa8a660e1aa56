package hubmux

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// Whatever an agent sends, the session neither panics nor hangs: it serves
// what is valid and ends on what is not, or when the input runs out.
func FuzzServe(f *testing.F) {
	frame := func(typ uint8, flags uint16, id, length uint32, data string) []byte {
		var h header
		h.encode(typ, flags, id, length)
		return append(h[:], data...)
	}
	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	f.Add(cat(frame(typeWindowUpdate, flagSYN, 1, 0, ""), frame(typeData, 0, 1, 5, "hello")))
	f.Add(cat(frame(typeWindowUpdate, flagSYN, 1, 0, ""), frame(typeData, flagFIN, 1, 2, "hi"), frame(typePing, flagSYN, 0, 7, "")))
	f.Add(cat(frame(typeWindowUpdate, flagSYN, 1, 0, ""), frame(typeWindowUpdate, flagSYN, 3, 0, ""), frame(typeData, 0, 3, 3, "bye")))
	f.Add(cat(frame(typeWindowUpdate, flagSYN, 1, 0, ""), frame(typeData, flagRST, 1, 0, ""), frame(typeData, 0, 1, 1, "x")))
	f.Add(frame(typeGoAway, 0, 0, goAwayNormal, ""))
	f.Add(frame(typeData, 0, 9, 4, "lost"))
	f.Fuzz(func(t *testing.T, in []byte) {
		hubConn, peer := net.Pipe()
		defer peer.Close()
		s := Server(hubConn, Config{})
		served := make(chan error, 1)
		go func() { served <- s.Serve() }()
		go func() { _, _ = io.Copy(io.Discard, peer) }()
		// Read the control stream as the gateway would, so data frames
		// are consumed.
		go func() {
			st, err := s.Accept(t.Context())
			if err == nil {
				_, _ = io.Copy(io.Discard, st)
			}
		}()
		_ = peer.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = peer.Write(in)
		_ = peer.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Fatal("the session neither ended nor read its input")
		}
	})
}
