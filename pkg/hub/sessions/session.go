package sessions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/edgefleet/fleet/internal/version"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/hoststatus"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

// Session is one agent's connection on this replica.
type Session struct {
	reg *Registry
	id  pki.Identity
	mux hubmux.Mux
	// key names the public key of the certificate the session was opened
	// with; expires is when the newest certificate it holds (that one, or
	// one issued on the session) expires, in UnixNano.
	key     atomic.Pointer[string]
	expires atomic.Int64

	// ctrl is the control stream, opened by the agent. Between messages
	// nothing reads it: the mux wakes a handler when data arrives.
	ctrl    hubmux.ControlStream
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
	// streams is the number of hub-opened streams (tunnels) open.
	streams atomic.Int32

	// Per-session budgets: a misbehaving agent costs bounded API writes
	// and signatures. Status is level-triggered, so a report dropped here
	// is superseded by the next one (the agent resends on a timer).
	statusLimit *rate.Limiter
	csrLimit    *rate.Limiter

	// capabilities are what the agent's Hello says it can do.
	capabilities []string
	// protocol is the version the session is written in: the Hello's
	// until the two sides agree on one, then the highest both speak.
	protocol int
	// agentVersion is the agent's release, as its Hello says.
	agentVersion string

	// Touched only by the push worker that holds this session: the push
	// queue never hands one session to two workers at once.
	lastPushed *wire.DesiredState
	// pushedRelease is lastPushed's release order, for the session's
	// reader: only that release's binary is served to the agent.
	pushedRelease atomic.Pointer[wire.AgentReleaseOrder]
	// pushedStage is lastPushed's stage orders, for the same: the
	// archives the hub carries are served only to hosts ordered them.
	pushedStage atomic.Pointer[[]wire.StageOrder]
	reports     hoststatus.Reports
}

// NewSession makes the session of peer over an upgraded connection; the
// mux is started (see hubmux.Session.Start). Handshake comes next.
func (r *Registry) NewSession(conn net.Conn, peer identity.Peer) (*Session, error) {
	mux, err := hubmux.New(r.opts.Mux, conn, hubmux.Config{
		CloseTimeout: transport.WriteTimeout,
		// Only the hub opens tunnels.
		OnRefusedStream: func() { rejectedFrames.WithLabelValues("UnexpectedStream").Inc() },
	})
	if err != nil {
		return nil, err
	}
	// The session's one goroutine from now on, parked on the socket while
	// the agent is quiet.
	mux.Start()
	ss := &Session{reg: r, id: peer.ID, mux: mux, done: make(chan struct{}),
		statusLimit: rate.NewLimiter(2, 10),
		csrLimit:    rate.NewLimiter(rate.Every(10*time.Second), 2)}
	ss.setKey(peer.Key)
	ss.expires.Store(peer.NotAfter.UnixNano())
	return ss, nil
}

// Peer is the host the session speaks for, with the key its holder proved
// or was last issued a certificate for on it.
func (ss *Session) Peer() identity.Peer {
	return identity.Peer{ID: ss.id, Key: ss.keyID(), NotAfter: time.Unix(0, ss.expires.Load())}
}

// Done is closed when the session has ended.
func (ss *Session) Done() <-chan struct{} { return ss.done }

// Replaced tells that a newer session of the same host took over.
func (ss *Session) Replaced() bool { return ss.replaced.Load() }

// Reports is the session's memory of its agent's reports.
func (ss *Session) Reports() *hoststatus.Reports { return &ss.reports }

// TunnelCapable tells that the agent serves tunnels.
func (ss *Session) TunnelCapable() bool { return ss.Can(wire.CapabilityTunnel) }

// Can tells that the agent's Hello announced capability c.
func (ss *Session) Can(c string) bool { return slices.Contains(ss.capabilities, c) }

// OpenStreams is the number of hub-opened streams open now.
func (ss *Session) OpenStreams() int32 { return ss.streams.Load() }

// ErrStreamBudget means the session already carries its limit of streams.
var ErrStreamBudget = errors.New("the agent carries its maximum of tunnels")

// OpenStream opens a stream to the agent, at most limit at once; release
// gives its place back once the stream is closed for good.
func (ss *Session) OpenStream(limit int32) (st net.Conn, release func(), err error) {
	if n := ss.streams.Add(1); n > limit {
		ss.streams.Add(-1)
		return nil, nil, ErrStreamBudget
	}
	s, err := ss.mux.OpenTunnel()
	if err != nil {
		ss.streams.Add(-1)
		return nil, nil, fmt.Errorf("opening a stream: %w", err)
	}
	return s, func() { ss.streams.Add(-1) }, nil
}

// UnsupportedError is the refusal of an agent that shares no protocol
// version with this hub.
type UnsupportedError struct {
	// Reason is infrav1.AgentTooOldReason or AgentTooNewReason.
	Reason string
	// Message says what each side speaks and which to upgrade.
	Message string
}

func (e *UnsupportedError) Error() string { return e.Message }

// Protocol is the version the session speaks.
func (ss *Session) Protocol() int { return ss.protocol }

// AgentVersion is the agent's release, as its Hello said.
func (ss *Session) AgentVersion() string { return ss.agentVersion }

// Handshake waits for the control stream and the agent's Hello, checks
// that the Hello is about the certificate's host, and agrees on the
// protocol version: the highest both speak, which a Welcome announces
// from version 2. An agent sharing none gets an UnsupportedError.
func (ss *Session) Handshake(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stream, err := ss.mux.AcceptControl(ctx)
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
	ss.capabilities = slices.Clone(hello.Capabilities)
	ss.agentVersion = hello.AgentVersion
	agent, served := hello.Speaks(), ss.reg.opts.speaks()
	v, ok := wire.Negotiate(served, agent)
	if !ok {
		// Written in a version the agent reads: an Error's shape never
		// changes.
		ss.protocol = agent.Max
		refusal := unsupported(hello.AgentVersion, agent, served)
		ss.fail(&wire.Error{Code: wire.ErrUnsupportedProtocol, Message: refusal.Message})
		return refusal
	}
	ss.protocol = v
	if v >= wire.Since(wire.TypeWelcome) {
		if err := ss.send(&wire.Welcome{HubVersion: version.Version, Time: ptr.To(metav1.NowMicro())}); err != nil {
			return fmt.Errorf("sending Welcome: %w", err)
		}
	}
	_ = stream.SetReadDeadline(time.Time{})
	return nil
}

// unsupported says why an agent of release agentVersion speaking agent's
// versions cannot be served by a hub serving served, and what to upgrade.
func unsupported(agentVersion string, agent, served wire.ProtocolRange) *UnsupportedError {
	e := &UnsupportedError{Reason: infrav1.AgentTooOldReason}
	what := "upgrade fleet-agent on this host"
	if agent.Min > served.Max {
		e.Reason, what = infrav1.AgentTooNewReason, "upgrade the hub first: hubs are upgraded before agents"
	}
	e.Message = fmt.Sprintf("fleet-agent %s speaks protocol %s, this hub (fleet-hub %s) serves %s: %s (docs/PROTOCOL.md, \"Version skew\")",
		agentVersion, agent, version.Version, served, what)
	return e
}

// read reads and decodes one frame, counting and answering what is wrong.
func (ss *Session) read(maxSize int) (any, error) {
	frame, err := wire.ReadFrame(ss.ctrl, maxSize)
	if err != nil {
		if errors.Is(err, wire.ErrTooLarge) {
			rejectedFrames.WithLabelValues(string(wire.ErrFrameTooLarge)).Inc()
			ss.fail(&wire.Error{Code: wire.ErrFrameTooLarge, Message: err.Error()})
		}
		return nil, err
	}
	msg, v, err := wire.DecodeVersion(frame)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			rejectedFrames.WithLabelValues(string(we.Code)).Inc()
			ss.fail(we)
		}
		return nil, err
	}
	if ss.protocol == 0 {
		ss.protocol = v // the Hello's, for answers before the agreement
	}
	messages.WithLabelValues("in", typeName(msg)).Inc()
	return msg, nil
}

// send writes one message; writes are serialised and bounded in time.
func (ss *Session) send(msg any) error {
	frame, err := wire.EncodeAs(max(ss.protocol, 1), msg)
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
func (ss *Session) fail(e *wire.Error) {
	if ss.ctrl != nil {
		_ = ss.send(e)
	}
}

func (ss *Session) revoke() {
	ss.reg.log.Info("Revoked a session: its EdgeHost is gone or being deleted", "EdgeHost", ss.id.String())
	ss.fail(&wire.Error{Code: wire.ErrRevoked, Message: identity.ErrRevoked.Error()})
	ss.Close()
}

// moved ends the session of a host clusterctl move took to another hub
// cluster: not a revocation, so its agent keeps its identity and workload.
func (ss *Session) moved() {
	ss.reg.log.Info("Closed a session: its EdgeHost moved to another hub cluster", "EdgeHost", ss.id.String())
	ss.fail(&wire.Error{Code: wire.ErrUnknownHost, Message: identity.ErrMoved.Error()})
	ss.Close()
}

// distrusted ends the session for err, a reason identity.Trust gave.
func (ss *Session) distrusted(err error) {
	if errors.Is(err, identity.ErrMoved) {
		ss.moved()
		return
	}
	ss.revoke()
}

// Close ends the session.
func (ss *Session) Close() {
	ss.once.Do(func() {
		close(ss.done)
		_ = ss.mux.Close()
	})
}

// kickPush asks for the desired state to be (re)computed and sent. Pushes
// run on the registry's shared push workers, not on a goroutine per
// session: an idle hub holds thousands of sessions.
func (ss *Session) kickPush(seen time.Time) {
	ss.pendingSince.CompareAndSwap(0, seen.UnixNano())
	ss.reg.pushes.Add(ss)
}

// start serves the session from now on. An idle session has one goroutine,
// the mux's: a handler goroutine runs only while the agent's messages
// wait (wake), and pushes, lastSeenTime and the rest run on shared workers
// and timers. The handler's first act is recording the connection, an API
// write that may wait its turn behind thousands of others after an outage;
// meanwhile the mux still answers the agent's pings.
func (ss *Session) start(ctx context.Context) {
	ss.startHousekeeping()
	ss.ctrl.SetNotify(func() { ss.wake(ctx) })
	ss.wake(ctx)
}

// wake starts the handler unless it runs.
func (ss *Session) wake(ctx context.Context) {
	if ss.handling.CompareAndSwap(false, true) {
		go ss.handle(ctx)
	}
}

// handle serves the agent's messages until none waits, then returns; a
// wake between its last look and its return is not lost: it looks again.
func (ss *Session) handle(ctx context.Context) {
	for {
		if !ss.connected {
			ss.connected = true
			ss.reg.status.Connected(ctx, ss)
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
func (ss *Session) end() {
	ss.endOnce.Do(func() {
		ss.stopHousekeeping()
		ss.Close()
		ss.reg.unregister(ss)
	})
}

// serve handles one message from the agent; false ends the session.
func (ss *Session) serve(ctx context.Context, msg any) bool {
	switch m := msg.(type) {
	case *wire.Status:
		return ss.serveStatus(ctx, m)
	case *wire.CertificateRequest:
		return ss.serveCertificateRequest(ctx, m)
	case *wire.ReleaseRequest:
		return ss.serveReleaseRequest(m)
	default:
		rejectedFrames.WithLabelValues(string(wire.ErrUnexpected)).Inc()
		ss.fail(&wire.Error{Code: wire.ErrUnexpected, Message: fmt.Sprintf("%s is not expected from an agent here", typeName(msg))})
		return false
	}
}

func (ss *Session) serveStatus(ctx context.Context, st *wire.Status) bool {
	if !ss.statusLimit.Allow() {
		rejectedFrames.WithLabelValues("StatusRateLimited").Inc()
		return true
	}
	// The providerID is the hub's to define: Cluster API matches Nodes by
	// it, and a host claiming another's would tie a Machine to a Node that
	// is not its own.
	if st.ProviderID != "" && st.ProviderID != inventory.ProviderIDOf(ss.id.Namespace, ss.id.Name) {
		rejectedFrames.WithLabelValues("ForeignProviderID").Inc()
		ss.reg.log.Info("Ignoring a providerID that is not the host's", "EdgeHost", ss.id.String(), "reported", st.ProviderID)
		fixed := *st
		fixed.ProviderID = ""
		st = &fixed
	}
	err := ss.reg.status.RecordStatus(ctx, ss, st)
	switch {
	case err == nil:
	case errors.Is(err, identity.ErrReplaced):
		// The cache may predate a rotation on this session; the report is
		// resent on the agent's timer.
		go ss.reg.closeIfReplaced(ss)
	case errors.Is(err, identity.ErrRevoked), errors.Is(err, identity.ErrMoved):
		ss.distrusted(err)
		return false
	default:
		ss.reg.log.Error(err, "Recording agent status", "EdgeHost", ss.id.String())
	}
	return true
}

func (ss *Session) serveCertificateRequest(ctx context.Context, m *wire.CertificateRequest) bool {
	if !ss.csrLimit.Allow() {
		rejectedFrames.WithLabelValues("CertificateRequestRateLimited").Inc()
		_ = ss.send(&wire.Error{Code: wire.ErrRejected, Message: "certificate requests are limited to one per 10 s"})
		return true
	}
	rot, err := ss.reg.authority.Rotate(ctx, ss.Peer(), m.CSR)
	switch {
	case errors.Is(err, identity.ErrReplaced):
		ss.Close()
		return false
	case errors.Is(err, identity.ErrRevoked), errors.Is(err, identity.ErrMoved):
		ss.distrusted(err)
		return false
	case err != nil:
		_ = ss.send(&wire.Error{Code: wire.ErrRejected, Message: "certificate request refused: " + err.Error()})
		return true
	}
	// The session now counts as holding the new key: its holder is the
	// one who received it.
	ss.expires.Store(rot.NotAfter.UnixNano())
	ss.setKey(rot.Key)
	return ss.send(&wire.Certificate{Certificate: rot.Certificate}) == nil
}

func (ss *Session) serveReleaseRequest(m *wire.ReleaseRequest) bool {
	if ss.reg.releases != nil && ss.orderedArchive(m.SHA256) {
		if err := ss.reg.releases.ServeArchive(ss, m); err != nil {
			ss.RefuseTransfer(m.SHA256, err.Error())
		}
		return true
	}
	ordered := ss.pushedRelease.Load()
	if ss.reg.releases == nil || ordered == nil {
		rejectedFrames.WithLabelValues("ReleaseNotOrdered").Inc()
		return ss.send(&wire.Error{Code: wire.ErrRejected, Message: "release request refused: this host is ordered to run no release"}) == nil
	}
	if err := ss.reg.releases.Serve(ss, m, ordered); err != nil {
		rejectedFrames.WithLabelValues("ReleaseRefused").Inc()
		return ss.send(&wire.Error{Code: wire.ErrRejected, Message: "release request refused: " + err.Error()}) == nil
	}
	return true
}

// RefuseTransfer tells the agent that its request for the bytes of sha
// will not be served, and why, so it stops waiting for them.
func (ss *Session) RefuseTransfer(sha, reason string) {
	rejectedFrames.WithLabelValues("ArchiveRefused").Inc()
	_ = ss.send(&wire.Error{Code: wire.ErrRejected, Message: "archive request refused: " + reason, SHA256: sha})
}

// orderedArchive reports whether the host was last ordered to stage, from
// the hub, the archive of sha.
func (ss *Session) orderedArchive(sha string) bool {
	stage := ss.pushedStage.Load()
	return stage != nil && slices.ContainsFunc(*stage, func(o wire.StageOrder) bool { return o.Hub && o.SHA256 == sha })
}

// startHousekeeping refreshes lastSeenTime every LastSeenInterval on a
// timer instead of a goroutine; its state lives in the session, so an idle
// session holds no closure for it. The same timer closes the session when
// its certificate expires.
func (ss *Session) startHousekeeping() {
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	ss.seenTimer = time.AfterFunc(ss.nextHousekeeping(), ss.refreshLastSeen)
}

// nextHousekeeping is the time to the next lastSeenTime refresh, or to the
// certificate's expiry if that comes first.
func (ss *Session) nextHousekeeping() time.Duration {
	d := ss.reg.opts.LastSeenInterval
	if e := ss.expires.Load(); e != 0 {
		d = min(d, max(time.Until(time.Unix(0, e)), 0))
	}
	return d
}

func (ss *Session) refreshLastSeen() {
	select {
	case <-ss.done:
		return
	default:
	}
	if e := ss.expires.Load(); e != 0 && !time.Now().Before(time.Unix(0, e)) {
		// A session lives no longer than the credential it was opened (or
		// last renewed) with.
		ss.reg.log.Info("Closing a session whose client certificate expired", "EdgeHost", ss.id.String())
		ss.Close()
		return
	}
	ss.reg.status.TouchLastSeen(context.Background(), ss)
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	if !ss.seenStopped {
		ss.seenTimer.Reset(ss.nextHousekeeping())
	}
}

// RefreshLastSeenBy moves the next lastSeenTime refresh to at, if that is
// sooner.
func (ss *Session) RefreshLastSeenBy(at time.Time) {
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	if ss.seenStopped || ss.seenTimer == nil {
		return
	}
	if d := max(time.Until(at), 0); d < ss.nextHousekeeping() {
		ss.seenTimer.Reset(d)
	}
}

func (ss *Session) stopHousekeeping() {
	ss.seenMu.Lock()
	defer ss.seenMu.Unlock()
	ss.seenStopped = true
	if ss.seenTimer != nil {
		ss.seenTimer.Stop()
	}
}

// keyID is the key the session's holder proved, or was last issued a
// certificate for on it.
func (ss *Session) keyID() string {
	if k := ss.key.Load(); k != nil {
		return *k
	}
	return ""
}

func (ss *Session) setKey(k string) { ss.key.Store(&k) }
