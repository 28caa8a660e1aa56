package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// session is one agent's connection on this replica.
type session struct {
	srv *Server
	id  pki.Identity
	mux *hubmux.Session
	// key names the public key of the certificate the session was opened
	// with; expires is when the newest certificate it holds (that one, or
	// one issued on the session) expires, in UnixNano.
	key     atomic.Pointer[string]
	expires atomic.Int64

	// ctrl is the control stream, opened by the agent. Between messages
	// nothing reads it: the mux wakes a handler when data arrives.
	ctrl    *hubmux.Stream
	writeMu sync.Mutex
	// handling is true while a handler goroutine serves the control
	// stream; connected tells that handler has recorded the connection.
	handling  atomic.Bool
	connected bool
	endOnce   sync.Once

	// seenTimer refreshes lastSeenTime (startHousekeeping).
	seenMu      sync.Mutex
	seenTimer   *time.Timer
	seenStopped bool

	// pendingSince is when the oldest change not yet pushed was seen
	// (UnixNano, 0: nothing pending); it is what push latency is measured
	// from.
	pendingSince atomic.Int64
	done         chan struct{}
	once         sync.Once
	replaced     atomic.Bool
	// tunnels is the number of edge-reach tunnels open on this session.
	tunnels atomic.Int32

	// Per-session budgets: a misbehaving agent costs bounded API writes
	// and signatures. Status is level-triggered, so a report dropped here
	// is superseded by the next one (the agent resends on a timer).
	statusLimit *rate.Limiter
	csrLimit    *rate.Limiter

	// tunnelCapable is the agent's Hello saying it serves tunnels.
	tunnelCapable bool

	// Touched only by the push worker that holds this session: the push
	// queue never hands one session to two workers at once.
	lastPushed *wire.DesiredState
	// Touched only by the handler (one at a time: handling): the last
	// report taken, as digests rather than the report itself (some 750
	// bytes a session otherwise, for two comparisons).
	lastStatus statusDigest

	// Link health is written coarsely (see recordStatus): the last one
	// written, and a newer one waiting for the next lastSeen refresh.
	linkMu      sync.Mutex
	writtenLink *infrav1.LinkHealth
	pendingLink *infrav1.LinkHealth
}

// holdLink keeps a link report for the next lastSeen refresh, unless its
// verdict differs from the written one: then it must be written now.
func (ss *session) holdLink(l *infrav1.LinkHealth, th linkhealth.Thresholds) (held bool) {
	ss.linkMu.Lock()
	defer ss.linkMu.Unlock()
	if ss.writtenLink == nil {
		return false
	}
	a := linkhealth.Condition(ss.writtenLink, th, false)
	b := linkhealth.Condition(l, th, a.Status == metav1.ConditionTrue)
	if a.Status != b.Status || a.Reason != b.Reason {
		return false
	}
	ss.pendingLink = l
	return true
}

// wroteLink records what was written.
func (ss *session) wroteLink(l *infrav1.LinkHealth) {
	ss.linkMu.Lock()
	defer ss.linkMu.Unlock()
	ss.writtenLink = l
	// A newer report held meanwhile still waits for its write.
	if ss.pendingLink == l {
		ss.pendingLink = nil
	}
}

// takePendingLink returns the held report, if any, for a write.
func (ss *session) takePendingLink() *infrav1.LinkHealth {
	ss.linkMu.Lock()
	defer ss.linkMu.Unlock()
	return ss.pendingLink
}

func newSession(s *Server, id pki.Identity, mux *hubmux.Session) *session {
	return &session{srv: s, id: id, mux: mux, done: make(chan struct{}),
		statusLimit: rate.NewLimiter(2, 10),
		csrLimit:    rate.NewLimiter(rate.Every(10*time.Second), 2)}
}

// handshake waits for the control stream and the agent's Hello, and checks
// that the Hello is about the certificate's host.
func (ss *session) handshake(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := ss.mux.Accept(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the control stream: %w", err)
	}
	ss.ctrl = stream
	_ = stream.SetReadDeadline(time.Now().Add(timeout))
	msg, err := ss.read(wire.MaxHelloSize)
	if err != nil {
		return err
	}
	hello, ok := msg.(*wire.Hello)
	if !ok {
		ss.fail(&wire.Error{Code: wire.ErrUnexpected, Message: "the first message must be Hello"})
		return errors.New("first message is not Hello")
	}
	if hello.Host != ss.id.Name {
		ss.fail(&wire.Error{Code: wire.ErrForbidden,
			Message: fmt.Sprintf("this certificate belongs to EdgeHost %s, not %q", ss.id.Name, hello.Host)})
		return fmt.Errorf("hello for %q on a certificate of %s", hello.Host, ss.id)
	}
	ss.tunnelCapable = slices.Contains(hello.Capabilities, wire.CapabilityTunnel)
	_ = stream.SetReadDeadline(time.Time{})
	return nil
}

// read reads and decodes one frame, counting and answering what is wrong.
func (ss *session) read(maxSize int) (any, error) {
	frame, err := wire.ReadFrame(ss.ctrl, maxSize)
	if err != nil {
		if errors.Is(err, wire.ErrTooLarge) {
			rejectedFrames.WithLabelValues(string(wire.ErrFrameTooLarge)).Inc()
			ss.fail(&wire.Error{Code: wire.ErrFrameTooLarge, Message: err.Error()})
		}
		return nil, err
	}
	msg, err := wire.Decode(frame)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			rejectedFrames.WithLabelValues(string(we.Code)).Inc()
			ss.fail(we)
		}
		return nil, err
	}
	messages.WithLabelValues("in", typeName(msg)).Inc()
	return msg, nil
}

func typeName(msg any) string {
	switch msg.(type) {
	case *wire.Hello:
		return string(wire.TypeHello)
	case *wire.Status:
		return string(wire.TypeStatus)
	case *wire.CertificateRequest:
		return string(wire.TypeCertificateRequest)
	case *wire.DesiredState:
		return string(wire.TypeDesiredState)
	case *wire.Certificate:
		return string(wire.TypeCertificate)
	case *wire.Error:
		return string(wire.TypeError)
	}
	return "unknown"
}

// send writes one message; writes are serialised and bounded in time.
func (ss *session) send(msg any) error {
	frame, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	ss.writeMu.Lock()
	defer ss.writeMu.Unlock()
	_ = ss.ctrl.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	if err := wire.WriteFrame(ss.ctrl, frame); err != nil {
		return err
	}
	messages.WithLabelValues("out", typeName(msg)).Inc()
	return nil
}

// fail tells the agent why the session ends.
func (ss *session) fail(e *wire.Error) {
	if ss.ctrl != nil {
		_ = ss.send(e)
	}
}

func (ss *session) revoke() {
	ss.srv.log.Info("Revoked a session: its EdgeHost is gone or being deleted", "EdgeHost", ss.id.String())
	ss.fail(&wire.Error{Code: wire.ErrRevoked, Message: errRevoked.Error()})
	ss.close()
}

func (ss *session) close() {
	ss.once.Do(func() {
		close(ss.done)
		_ = ss.mux.Close()
	})
}

// kickPush asks for the desired state to be (re)computed and sent. Pushes
// run on the gateway's shared push workers, not on a goroutine per
// session: an idle hub holds thousands of sessions.
func (ss *session) kickPush(seen time.Time) {
	ss.pendingSince.CompareAndSwap(0, seen.UnixNano())
	ss.srv.pushes.Add(ss)
}

// start serves the session from now on. An idle session has one goroutine,
// the mux's: a handler goroutine runs only while the agent's messages
// wait (wake), and pushes, lastSeenTime and the rest run on shared workers
// and timers. The handler's first act is recording the connection, an API
// write that may wait its turn behind thousands of others after an outage;
// meanwhile the mux still answers the agent's pings.
func (ss *session) start(ctx context.Context) {
	ss.startHousekeeping()
	ss.ctrl.SetNotify(func() { ss.wake(ctx) })
	ss.wake(ctx)
}

// wake starts the handler unless it runs.
func (ss *session) wake(ctx context.Context) {
	if ss.handling.CompareAndSwap(false, true) {
		go ss.handle(ctx)
	}
}

// handle serves the agent's messages until none waits, then returns; a
// wake between its last look and its return is not lost: it looks again.
func (ss *session) handle(ctx context.Context) {
	for {
		if !ss.connected {
			ss.connected = true
			ss.srv.markConnected(ctx, ss)
		}
		for ss.ctrl.ReadReady() {
			msg, err := ss.read(wire.MaxFrameSize)
			if err != nil || !ss.serve(ctx, msg) {
				ss.end()
				return
			}
		}
		ss.handling.Store(false)
		if !ss.ctrl.ReadReady() || !ss.handling.CompareAndSwap(false, true) {
			return
		}
	}
}

// end closes the session and forgets it, once.
func (ss *session) end() {
	ss.endOnce.Do(func() {
		ss.stopHousekeeping()
		ss.close()
		ss.srv.unregister(ss)
	})
}

// serve handles one message from the agent; false ends the session.
func (ss *session) serve(ctx context.Context, msg any) bool {
	switch m := msg.(type) {
	case *wire.Status:
		if !ss.statusLimit.Allow() {
			rejectedFrames.WithLabelValues("StatusRateLimited").Inc()
			return true
		}
		if err := ss.srv.recordStatus(ctx, ss, m); err != nil {
			if errors.Is(err, errReplaced) {
				// The cache may predate a rotation on this session; the
				// report is resent on the agent's timer.
				go ss.srv.closeIfReplaced(ss)
				return true
			}
			if errors.Is(err, errRevoked) {
				ss.revoke()
				return false
			}
			ss.srv.log.Error(err, "Recording agent status", "EdgeHost", ss.id.String())
		}
	case *wire.CertificateRequest:
		if !ss.csrLimit.Allow() {
			rejectedFrames.WithLabelValues("CertificateRequestRateLimited").Inc()
			_ = ss.send(&wire.Error{Code: wire.ErrRejected, Message: "certificate requests are limited to one per 10 s"})
			return true
		}
		cert, err := ss.srv.rotate(ctx, ss, m.CSR)
		if errors.Is(err, errReplaced) {
			ss.close()
			return false
		}
		if errors.Is(err, errRevoked) {
			ss.revoke()
			return false
		}
		if err != nil {
			_ = ss.send(&wire.Error{Code: wire.ErrRejected, Message: "certificate request refused: " + err.Error()})
			return true
		}
		if err := ss.send(&wire.Certificate{Certificate: cert}); err != nil {
			return false
		}
	default:
		rejectedFrames.WithLabelValues(string(wire.ErrUnexpected)).Inc()
		ss.fail(&wire.Error{Code: wire.ErrUnexpected, Message: fmt.Sprintf("%s is not expected from an agent here", typeName(msg))})
		return false
	}
	return true
}

// push sends the desired state if it changed since the last push. It is
// computed from the informer cache, so a change costs no API read, except
// for the bootstrap data, read once per new assignment. retry is true when
// the push failed for a reason worth another try soon.
func (ss *session) push() (retry bool) {
	select {
	case <-ss.done:
		return false
	default:
	}
	seen := ss.pendingSince.Swap(0)
	requeue := func() bool {
		// Keep the older of this push's and a newer kick's time.
		for {
			cur := ss.pendingSince.Load()
			if (cur != 0 && cur <= seen) || ss.pendingSince.CompareAndSwap(cur, seen) {
				return true
			}
		}
	}
	host := &infrav1.EdgeHost{}
	if err := ss.srv.client.Get(context.Background(), client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
		return requeue()
	}
	if err := trust(host, peer{id: ss.id, key: ss.keyID()}); err != nil {
		if errors.Is(err, errReplaced) {
			go ss.srv.closeIfReplaced(ss)
			return requeue()
		}
		ss.revoke()
		return false
	}
	reach := ss.srv.reachFor(context.Background(), host)
	var desired *wire.DesiredState
	switch {
	case ss.lastPushed != nil && sameIntent(ss.lastPushed, host) && wire.SameReach(ss.lastPushed.Reach, reach):
		return false
	case ss.lastPushed != nil && sameIntent(ss.lastPushed, host):
		// Only the cluster's endpoint or control plane moved: the same
		// state with the new reach, without reading the bootstrap Secret
		// again.
		d := *ss.lastPushed
		d.Reach = reach
		desired = &d
	default:
		var err error
		if desired, err = ss.srv.desiredFor(context.Background(), host); err != nil {
			ss.srv.log.Error(err, "Computing desired state", "EdgeHost", ss.id.String())
			return requeue()
		}
		desired.Reach = reach
	}
	if ss.lastPushed != nil && equality.Semantic.DeepEqual(ss.lastPushed, desired) {
		return false
	}
	if err := ss.send(desired); err != nil {
		ss.close()
		return false
	}
	if seen != 0 {
		pushLatency.Observe(time.Since(time.Unix(0, seen)).Seconds())
	}
	ss.lastPushed = desired
	return false
}

// sameIntent tells, without reading the bootstrap Secret, that the host
// still wants what was last pushed (the common case: a status-only update).
func sameIntent(last *wire.DesiredState, h *infrav1.EdgeHost) bool {
	if last.Generation != h.Generation {
		return false
	}
	return last.Deprovision == wantsDeprovision(h) && (last.Assignment != nil) == (h.Spec.ClaimRef != nil)
}

// startHousekeeping refreshes lastSeenTime every LastSeenInterval on a
// timer instead of a goroutine; its state lives in the session, so an idle
// session holds no closure for it.
// The same timer closes the session when its certificate expires.
func (ss *session) startHousekeeping() {
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	ss.seenTimer = time.AfterFunc(ss.nextHousekeeping(), ss.refreshLastSeen)
}

// nextHousekeeping is the time to the next lastSeenTime refresh, or to the
// certificate's expiry if that comes first.
func (ss *session) nextHousekeeping() time.Duration {
	d := ss.srv.opts.LastSeenInterval
	if e := ss.expires.Load(); e != 0 {
		d = min(d, max(time.Until(time.Unix(0, e)), 0))
	}
	return d
}

func (ss *session) refreshLastSeen() {
	select {
	case <-ss.done:
		return
	default:
	}
	if e := ss.expires.Load(); e != 0 && !time.Now().Before(time.Unix(0, e)) {
		// Its certificate expired: a session lives no longer than the
		// credential it was opened (or last renewed) with.
		ss.srv.log.Info("Closing a session whose client certificate expired", "EdgeHost", ss.id.String())
		ss.close()
		return
	}
	ss.srv.touchLastSeen(context.Background(), ss)
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	if !ss.seenStopped {
		ss.seenTimer.Reset(ss.nextHousekeeping())
	}
}

func (ss *session) stopHousekeeping() {
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	ss.seenStopped = true
	if ss.seenTimer != nil {
		ss.seenTimer.Stop()
	}
}

// keyID is the key the session's holder proved, or was last issued a
// certificate for on it.
func (ss *session) keyID() string {
	if k := ss.key.Load(); k != nil {
		return *k
	}
	return ""
}

func (ss *session) setKey(k string) { ss.key.Store(&k) }
