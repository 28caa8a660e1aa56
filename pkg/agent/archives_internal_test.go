package agent

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// A fetch asks the hub once per Open and reads the stream the hub opens
// for its sha256; a stream nobody asked for is not taken; the hub's
// refusal, or a session that ends, ends the wait; without a session
// there is nothing to ask.
func TestHubArchivesHandOverTheStreamAsked(t *testing.T) {
	h := newHubArchives()
	o := wire.StageOrder{Version: "v1.36.3", SHA256: strings.Repeat("a", 64), Hub: true}
	if _, _, _, err := h.Open(t.Context(), o, 0); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("without a session: %v", err)
	}

	asked := make(chan *wire.ReleaseRequest, 4)
	h.attach(func(m any) error { asked <- m.(*wire.ReleaseRequest); return nil })
	hubEnd, agentEnd := net.Pipe()
	if h.receive(agentEnd, &wire.ReleaseData{SHA256: o.SHA256, Size: 5}) {
		t.Fatal("a stream nobody asked for was taken")
	}
	type opened struct {
		body         io.ReadCloser
		start, total int64
		err          error
	}
	got := make(chan opened, 1)
	go func() {
		b, s, n, err := h.Open(t.Context(), o, 2)
		got <- opened{b, s, n, err}
	}()
	if req := <-asked; req.SHA256 != o.SHA256 || req.Offset != 2 {
		t.Fatalf("asked for %+v", req)
	}
	handled := make(chan bool, 1)
	go func() { handled <- h.receive(agentEnd, &wire.ReleaseData{SHA256: o.SHA256, Offset: 2, Size: 5}) }()
	go func() { _, _ = hubEnd.Write([]byte("cde")); _ = hubEnd.Close() }()
	r := <-got
	if r.err != nil || r.start != 2 || r.total != 5 {
		t.Fatalf("opened at %d of %d: %v", r.start, r.total, r.err)
	}
	if b, _ := io.ReadAll(r.body); string(b) != "cde" {
		t.Errorf("read %q", b)
	}
	select {
	case <-handled:
		t.Fatal("the stream's handler returned before the fetch was through")
	case <-time.After(50 * time.Millisecond):
	}
	_ = r.body.Close()
	if !<-handled {
		t.Error("the stream asked for was not taken")
	}

	go func() {
		_, _, _, err := h.Open(context.Background(), o, 0)
		got <- opened{err: err}
	}()
	<-asked
	h.refused(o.SHA256, "archive request refused: the hub cannot fetch the archive")
	if r := <-got; r.err == nil || !strings.Contains(r.err.Error(), "the hub cannot fetch the archive") {
		t.Errorf("a refusal: %v", r.err)
	}

	go func() {
		_, _, _, err := h.Open(context.Background(), o, 0)
		got <- opened{err: err}
	}()
	<-asked
	h.attach(nil)
	if r := <-got; r.err == nil || !strings.Contains(r.err.Error(), "session ended") {
		t.Errorf("a wait across the session's end: %v", r.err)
	}
}
