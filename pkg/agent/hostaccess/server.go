package hostaccess

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/logring"
	"github.com/edgefleet/fleet/pkg/agent/streams"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
)

// MaxOpen bounds the host-access streams an agent serves at once.
const MaxOpen = 4

// Server serves Logs and FactsRequest streams.
type Server struct {
	// Ring is the agent's own recent log.
	Ring *logring.Ring
	// Transcripts are the files holding the whole output of the last
	// bootstrap and reset.
	Transcripts map[wire.LogSource]string
	// Facts gathers the facts report.
	Facts func() wire.FactsReport
	Log   logr.Logger

	open atomic.Int32
}

// Handlers are the server's stream handlers by first-frame type.
func (s *Server) Handlers() map[wire.Type]streams.Handler {
	return map[wire.Type]streams.Handler{
		wire.TypeLogs:         func(st net.Conn, v int, m any) { s.ServeLogs(st, v, m.(*wire.Logs)) },
		wire.TypeFactsRequest: func(st net.Conn, v int, _ any) { s.ServeFacts(st, v) },
	}
}

// Capabilities are what the server lets the agent announce.
func (s *Server) Capabilities() []string {
	return []string{wire.CapabilityLogs, wire.CapabilityFacts}
}

func (s *Server) enter(st net.Conn, v int) bool {
	if s.open.Add(1) > MaxOpen {
		s.open.Add(-1)
		streams.Refuse(st, v, wire.ErrRejected, fmt.Sprintf("this agent already serves %d host-access streams", MaxOpen))
		return false
	}
	return true
}

// ServeFacts answers with the facts report. It closes st.
func (s *Server) ServeFacts(st net.Conn, v int) {
	defer st.Close()
	if !s.enter(st, v) {
		return
	}
	defer s.open.Add(-1)
	r := s.Facts()
	_ = streams.Write(st, v, &r)
}

// ServeLogs sends the log req asks for, redacted. It closes st.
func (s *Server) ServeLogs(st net.Conn, v int, req *wire.Logs) {
	defer st.Close()
	if !s.enter(st, v) {
		return
	}
	defer s.open.Add(-1)
	limit := req.LimitBytes
	if limit == 0 {
		limit = wire.MaxLogBytes
	}
	w := &limitedLines{w: st, left: limit}
	if req.Source == wire.LogAgent {
		if s.Ring == nil {
			streams.Refuse(st, v, wire.ErrRejected, "this agent keeps no log of its own")
			return
		}
		s.serveAgentLog(st, v, req, w)
		return
	}
	if req.Follow || req.SinceSeconds > 0 {
		streams.Refuse(st, v, wire.ErrRejected, "follow and since apply to the agent's own log only")
		return
	}
	path := s.Transcripts[req.Source]
	if path == "" {
		streams.Refuse(st, v, wire.ErrRejected, fmt.Sprintf("this agent keeps no %s transcript", req.Source))
		return
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		streams.Refuse(st, v, wire.ErrRejected, fmt.Sprintf("no %s has run on this host since its agent kept transcripts", req.Source))
		return
	}
	if err != nil {
		streams.Refuse(st, v, wire.ErrInternal, err.Error())
		return
	}
	defer f.Close()
	ready := &wire.LogsReady{}
	if fi, err := f.Stat(); err == nil {
		ready.Written = &metav1.Time{Time: fi.ModTime()}
	}
	if err := streams.Write(st, v, ready); err != nil {
		return
	}
	_ = st.SetDeadline(time.Time{})
	lines, err := readLines(f, int(req.TailLines))
	if err != nil {
		s.Log.Info("Reading a transcript failed", "source", string(req.Source), "error", err.Error())
		return
	}
	var red Redactor
	for _, l := range lines {
		if !w.line(red.Line(l)) {
			return
		}
	}
}

func (s *Server) serveAgentLog(st net.Conn, v int, req *wire.Logs, w *limitedLines) {
	var since time.Time
	if req.SinceSeconds > 0 {
		since = time.Now().Add(-time.Duration(req.SinceSeconds) * time.Second)
	}
	var red Redactor
	if !req.Follow {
		if streams.Write(st, v, &wire.LogsReady{}) != nil {
			return
		}
		_ = st.SetDeadline(time.Time{})
		for _, l := range s.Ring.Lines(since, int(req.TailLines)) {
			if !w.line(red.Line(l.Text)) {
				return
			}
		}
		return
	}
	backlog, f := s.Ring.Follow(since, int(req.TailLines))
	defer f.Close()
	if streams.Write(st, v, &wire.LogsReady{}) != nil {
		return
	}
	_ = st.SetDeadline(time.Time{})
	for _, l := range backlog {
		if !w.line(red.Line(l.Text)) {
			return
		}
	}
	// The hub ends a follow by closing the stream; reading tells.
	gone := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, st); close(gone) }()
	lost := int64(0)
	for {
		select {
		case <-gone:
			return
		case l := <-f.C():
			if n := f.Lost(); n > lost {
				if !w.line(fmt.Appendf(nil, "[… %d lines lost: the reader fell behind …]", n-lost)) {
					return
				}
				lost = n
			}
			if !w.line(red.Line(l.Text)) {
				return
			}
		}
	}
}

// readLines reads f's lines, the last tail of them if tail > 0.
func readLines(f io.Reader, tail int) ([][]byte, error) {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var lines [][]byte
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
		if tail > 0 && len(lines) > 2*tail {
			lines = append(lines[:0:0], lines[len(lines)-tail:]...)
		}
	}
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	return lines, sc.Err()
}

// limitedLines writes whole lines until left bytes are spent.
type limitedLines struct {
	w    net.Conn
	left int64
}

// line writes l and a newline; false when the limit is reached or the
// stream failed.
func (w *limitedLines) line(l []byte) bool {
	if int64(len(l))+1 > w.left {
		return false
	}
	_ = w.w.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	if _, err := w.w.Write(append(l, '\n')); err != nil {
		return false
	}
	w.left -= int64(len(l)) + 1
	return true
}
