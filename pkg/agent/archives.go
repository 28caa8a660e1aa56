package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// archiveWait bounds the wait for the hub to start sending an archive: it
// may first fetch it into its own cache, as long as its source timeout.
const archiveWait = 10 * time.Minute

// HubArchives brings the Kubernetes archives the hub carries (stage
// orders that say Hub) through the agent's session: it asks for the bytes
// from an offset and hands over the stream the hub opens for them. It is
// the staging room's source for such orders (kubestage.Options.Hub).
type HubArchives struct {
	mu   sync.Mutex
	send func(any) error
	// waiting holds, by sha256, the fetch that asked for an archive and
	// waits for its stream; ended is closed when the session goes.
	waiting map[string]*archiveWaiter
	ended   chan struct{}
}

// archiveWaiter is a fetch waiting for its stream, or for the hub's
// refusal; gone is closed when it stops waiting.
type archiveWaiter struct {
	ch      chan archiveStream
	refused chan string
	gone    chan struct{}
}

// archiveStream is a ReleaseData stream handed to the fetch that asked.
type archiveStream struct {
	conn net.Conn
	data *wire.ReleaseData
	// done is closed when the fetch is through with conn.
	done chan struct{}
}

// ArchivesFromHub is the agent's source of the archives the hub carries;
// a Stager that uses it makes the agent announce
// wire.CapabilityStageFromHub (see UseStager).
func (a *Agent) ArchivesFromHub() *HubArchives { return a.archives }

func newHubArchives() *HubArchives {
	return &HubArchives{waiting: map[string]*archiveWaiter{}, ended: make(chan struct{})}
}

// attach gives the source the new session's sender; nil ends the waits
// of the session that went.
func (h *HubArchives) attach(send func(any) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.send = send
	if send == nil {
		close(h.ended)
		h.ended = make(chan struct{})
	}
}

// Open asks the hub for o's archive from offset on and returns the stream
// it opens: the bytes from ReleaseData's offset (the hub's answer to
// where to start), and the archive's size.
func (h *HubArchives) Open(ctx context.Context, o wire.StageOrder, offset int64) (io.ReadCloser, int64, int64, error) {
	w := &archiveWaiter{ch: make(chan archiveStream), refused: make(chan string, 1), gone: make(chan struct{})}
	h.mu.Lock()
	send, ended := h.send, h.ended
	if send == nil {
		h.mu.Unlock()
		return nil, 0, 0, errors.New("not connected to the hub; fetching when the session is back")
	}
	if _, busy := h.waiting[o.SHA256]; busy {
		h.mu.Unlock()
		return nil, 0, 0, errors.New("this archive is being asked for already")
	}
	h.waiting[o.SHA256] = w
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if h.waiting[o.SHA256] == w {
			delete(h.waiting, o.SHA256)
		}
		h.mu.Unlock()
		close(w.gone)
	}()
	if err := send(&wire.ReleaseRequest{SHA256: o.SHA256, Offset: offset}); err != nil {
		return nil, 0, 0, fmt.Errorf("asking the hub for the archive: %w", err)
	}
	wait := time.NewTimer(archiveWait)
	defer wait.Stop()
	select {
	case st := <-w.ch:
		return &archiveBody{st: st}, st.data.Offset, st.data.Size, nil
	case why := <-w.refused:
		return nil, 0, 0, errors.New(why)
	case <-ctx.Done():
		return nil, 0, 0, ctx.Err()
	case <-ended:
		return nil, 0, 0, errors.New("the session ended before the hub started sending; asking again on the next one")
	case <-wait.C:
		return nil, 0, 0, fmt.Errorf("the hub did not start sending within %s (it may still be fetching the archive)", archiveWait)
	}
}

// refused ends the wait of the fetch that asked for sha with the hub's
// refusal.
func (h *HubArchives) refused(sha, message string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.waiting[sha]; w != nil {
		delete(h.waiting, sha)
		select {
		case w.refused <- message:
		default:
		}
	}
}

// receive hands a ReleaseData stream to the fetch waiting for its sha256
// and holds it until the fetch is through; false when none waits.
func (h *HubArchives) receive(st net.Conn, m *wire.ReleaseData) bool {
	h.mu.Lock()
	w := h.waiting[m.SHA256]
	if w != nil {
		// One stream per request: a second one for the same ask is
		// refused.
		delete(h.waiting, m.SHA256)
	}
	h.mu.Unlock()
	if w == nil {
		return false
	}
	// The fetch's own stall timer bounds the reads, not the deadline the
	// stream's first frame was read under.
	_ = st.SetDeadline(time.Time{})
	done := make(chan struct{})
	select {
	case w.ch <- archiveStream{conn: st, data: m, done: done}:
		<-done
		return true
	case <-w.gone:
		return false
	}
}

// archiveBody is the stream as the fetch reads it; Close hands it back.
type archiveBody struct {
	st   archiveStream
	once sync.Once
}

func (b *archiveBody) Read(p []byte) (int, error) { return b.st.conn.Read(p) }

func (b *archiveBody) Close() error {
	b.once.Do(func() { close(b.st.done) })
	return b.st.conn.Close()
}

// receiveTransfer serves a ReleaseData stream: an archive a staging fetch
// asked for, or else the bytes of the ordered agent release.
func (a *Agent) receiveTransfer(st net.Conn, v int, msg any) {
	if a.archives.receive(st, msg.(*wire.ReleaseData)) {
		return
	}
	a.receiveRelease(st, v, msg)
}
