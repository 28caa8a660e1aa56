package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
)

// sessionSource keeps one session to the hub open, forever: it enrolls if
// needed, connects, and after any failure waits a jittered, growing delay
// and tries again. It never gives up.
func (a *Agent) sessionSource(ctx context.Context) {
	go a.status.Run(ctx)
	attempt := 0
	var lastSession time.Time
	for ctx.Err() == nil {
		started := time.Now()
		sessions := a.sessions.Load()
		err := a.connectOnce(ctx)
		if a.sessions.Load() > sessions {
			lastSession = time.Now()
		}
		a.connected.Store(false)
		a.status.Attach(nil)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRevoked) {
			// A host that runs a workload keeps its identity and keeps
			// trying: enrolling afresh would make it a new, empty host that
			// resets what runs here without anyone having ordered it (the
			// hub may be restored, or the deletion a mistake).
			held := a.holdsWorkload()
			reenroll := a.cfg.Token != "" && !held
			a.log.Info("Hub revoked this host's identity", "reenroll", reenroll, "holdsWorkload", held)
			if reenroll {
				if ferr := a.store.ForgetIdentity(); ferr != nil {
					a.log.Error(ferr, "Forgetting revoked identity")
				}
			}
		}
		if time.Since(started) > time.Minute {
			attempt = 0 // the last session was healthy: start backing off afresh
		}
		delay := a.retryDelay(err, &attempt, lastSession)
		a.log.Info("Disconnected from hub, retrying", "reason", errString(err), "retryIn", delay.Round(time.Millisecond).String())
		a.announce(fmt.Sprintf("disconnected (%s), retrying in %s", truncate(errString(err), 120), delay.Round(time.Second)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// busyError: the hub turned the handshake or enrollment away for now
// (503 or 429 with Retry-After), to spread a crowd of agents over time.
type busyError struct {
	after time.Duration
}

func (e *busyError) Error() string {
	return fmt.Sprintf("hub busy, asked to retry in %s", e.after)
}

// unservedError: the hub accepted the connection but closed it before
// the TLS handshake, or did not finish the handshake within the dial
// timeout. A hub does that when more connections wait for a handshake than
// it serves in time (after an outage, a whole fleet dialling at once); it
// cannot answer 503 before TLS.
type unservedError struct {
	err error
}

func (e *unservedError) Error() string {
	return fmt.Sprintf("connecting to hub: accepted but not served (hub busy?): %v", e.err)
}

func (e *unservedError) Unwrap() error { return e.err }

// unservedCeiling caps the back-off after connections the hub accepted
// and did not serve: such a hub is up and working through a crowd, and an
// agent backing off to MaxBackoff would leave it idle at the end of one
// (docs/PERFORMANCE.md, "Cold start and reconnect storm"). The hub's own
// wait before closing paces the retries.
const unservedCeiling = 5 * time.Second

func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 && s <= 300 {
		return time.Duration(s) * time.Second
	}
	return 2 * time.Second
}

// retryDelay decides the wait before the next attempt. A busy hub's
// Retry-After is honoured, spread by jitter, without growing the back-off
// (being turned away is not failing). A hub that held a session minutes
// ago is most likely restarting: its agents cap their back-off at 10 s so
// a fleet is back soon after it is, instead of up to MaxBackoff later. A
// connection the hub accepted and did not serve caps it at
// unservedCeiling.
func (a *Agent) retryDelay(err error, attempt *int, lastSession time.Time) time.Duration {
	var busy *busyError
	var enrollErr *EnrollError
	if errors.As(err, &enrollErr) && (enrollErr.Status == http.StatusServiceUnavailable || enrollErr.Status == http.StatusTooManyRequests) {
		// Turned away for now (enrollment rate, a crowd on one token):
		// not a failure of this host's.
		busy = &busyError{after: 5 * time.Second}
		if enrollErr.RetryAfter > 0 {
			busy.after = enrollErr.RetryAfter
		}
	}
	if busy != nil || errors.As(err, &busy) {
		return busy.after + time.Duration(rand.Int64N(int64(busy.after)))
	}
	ceiling := a.cfg.MaxBackoff
	if !lastSession.IsZero() && time.Since(lastSession) < 5*time.Minute {
		ceiling = min(ceiling, 10*time.Second)
	}
	if _, ok := errors.AsType[*unservedError](err); ok {
		ceiling = min(ceiling, unservedCeiling)
	}
	d := backoff(*attempt, ceiling)
	*attempt++
	return d
}

func errString(err error) string {
	if err == nil {
		return "session closed"
	}
	return err.Error()
}

// connectOnce enrolls if the host has no identity, then runs one session
// until it ends.
func (a *Agent) connectOnce(ctx context.Context) error {
	creds, err := a.store.LoadIdentity()
	if errors.Is(err, state.ErrNotEnrolled) {
		if err := a.enroll(ctx); err != nil {
			return err
		}
		if creds, err = a.store.LoadIdentity(); err != nil {
			return fmt.Errorf("reading identity after enrollment: %w", err)
		}
	}
	if err != nil {
		return err
	}
	id := creds.Identity
	pair, err := creds.TLSCertificate()
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(creds.CAPEM) {
		return errors.New("stored hub CA is unreadable")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}

	// reached: the hub accepted the TCP connection (what follows, if it
	// fails, failed at a hub that is up).
	var reached atomic.Bool
	dialer := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := a.cfg.dialContext(ctx, network, addr)
			reached.Store(err == nil)
			return c, err
		},
		HandshakeTimeout: 15 * time.Second,
		TLSClientConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			RootCAs:      pool,
			ServerName:   serverName(a.cfg.Hub),
			Certificates: []tls.Certificate{pair},
		},
		ReadBufferSize:  4 << 10,
		WriteBufferSize: 4 << 10,
	}
	url := "wss://" + strings.TrimPrefix(strings.TrimSuffix(a.cfg.Hub, "/"), "https://") + wire.PathConnect
	ws, resp, err := dialer.DialContext(ctx, url, http.Header{"User-Agent": {"fleet-agent/" + version.Version}})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			return errRevoked
		}
		if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			return &busyError{after: retryAfter(resp.Header)}
		}
		if resp != nil {
			return fmt.Errorf("connecting to hub: %s", resp.Status)
		}
		if reached.Load() && (transport.ClosedUnserved(err) || errors.Is(err, context.DeadlineExceeded)) {
			return &unservedError{err: err}
		}
		return fmt.Errorf("connecting to hub: %w", err)
	}
	mux, err := transport.Client(transport.NewConn(ws), a.cfg.KeepAlive)
	if err != nil {
		_ = ws.Close()
		return err
	}
	defer mux.Close()
	a.mux.Store(mux)
	defer a.mux.Store(nil)
	ctrl, err := mux.OpenStream()
	if err != nil {
		return fmt.Errorf("opening control stream: %w", err)
	}
	if a.Applied().HostUID != id.UID {
		// Generations count per EdgeHost: under a new identity the old
		// number means nothing (and would make every new desired state look
		// old). The workload, if any, is kept so it still gets reset.
		if err := a.update(func(ap *state.Applied) { ap.HostUID, ap.Generation = id.UID, 0 }); err != nil {
			return err
		}
	}
	s := &agentSession{ctrl: ctrl}
	if err := s.send(&wire.Hello{AgentVersion: version.Version, Host: id.Host, ObservedGeneration: a.Applied().Generation,
		Capabilities: []string{wire.CapabilityTunnel}}); err != nil {
		return err
	}
	a.sessions.Add(1)
	a.connected.Store(true)
	a.log.Info("Connected to hub", "hub", a.cfg.Hub, "EdgeHost", id.Namespace+"/"+id.Host)
	a.announce("connected to " + a.cfg.Hub + " as " + id.Namespace + "/" + id.Host)
	a.status.Attach(func(st *wire.Status) error { return s.send(st) })

	sessCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-sessCtx.Done(); _ = mux.Close() }()
	rot := newRotator(a, s, leaf)
	go rot.run(sessCtx)
	go a.tunnels.Accept(sessCtx, mux)

	for {
		frame, err := wire.ReadFrame(ctrl, wire.MaxFrameSize)
		if err != nil {
			return fmt.Errorf("session: %w", err)
		}
		msg, err := wire.Decode(frame)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				_ = s.send(we)
			}
			return fmt.Errorf("hub sent a bad frame: %w", err)
		}
		switch m := msg.(type) {
		case *wire.DesiredState:
			if a.OnDesired != nil {
				a.OnDesired(m)
			}
			a.reach.Set(m)
			a.interruptIfReleased(m)
			// Latest wins: replace a desired state the worker has not
			// picked up yet.
			select {
			case <-a.desired:
			default:
			}
			a.desired <- m
		case *wire.Certificate:
			rot.received(m)
		case *wire.Error:
			if m.Code == wire.ErrRevoked {
				return errRevoked
			}
			if m.Code == wire.ErrRejected {
				a.log.Info("Hub rejected a request", "message", m.Message)
				continue
			}
			return fmt.Errorf("hub closed the session: %w", m)
		default:
			_ = s.send(&wire.Error{Code: wire.ErrUnexpected, Message: "agents do not accept this message"})
			return fmt.Errorf("hub sent an unexpected %T", msg)
		}
	}
}

type agentSession struct {
	mu   sync.Mutex
	ctrl net.Conn
}

func (s *agentSession) send(msg any) error {
	frame, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.ctrl.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	return wire.WriteFrame(s.ctrl, frame)
}

// rotator renews the client certificate over the session at a jittered
// 70–90 % of its lifetime, without dropping the session.
type rotator struct {
	a    *Agent
	s    *agentSession
	leaf *x509.Certificate

	mu         sync.Mutex
	pendingKey []byte
	got        chan struct{}
}

func newRotator(a *Agent, s *agentSession, leaf *x509.Certificate) *rotator {
	return &rotator{a: a, s: s, leaf: leaf, got: make(chan struct{}, 1)}
}

func (r *rotator) run(ctx context.Context) {
	for {
		r.mu.Lock()
		leaf := r.leaf
		r.mu.Unlock()
		deadline := rotationDeadline(leaf.NotBefore, leaf.NotAfter)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(deadline)):
		}
		keyPEM, csrPEM, err := pki.NewKeyAndCSR(leaf.Subject.CommonName)
		if err != nil {
			r.a.log.Error(err, "Generating key for certificate rotation")
			continue
		}
		r.mu.Lock()
		r.pendingKey = keyPEM
		r.mu.Unlock()
		if err := r.s.send(&wire.CertificateRequest{CSR: csrPEM}); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-r.got:
		case <-time.After(30 * time.Second):
			// No answer: try again at a new jittered point, or on reconnect.
		}
	}
}

func (r *rotator) received(c *wire.Certificate) {
	r.mu.Lock()
	key := r.pendingKey
	r.mu.Unlock()
	if key == nil {
		r.a.log.Info("Ignoring a certificate that was not asked for")
		return
	}
	if _, err := tls.X509KeyPair(c.Certificate, key); err != nil {
		// A late answer to an earlier request: the one for the pending
		// key may still come.
		r.a.log.Error(err, "Hub sent a certificate that does not match the new key")
		return
	}
	r.mu.Lock()
	r.pendingKey = nil
	r.mu.Unlock()
	leaf, err := pki.ParseCertPEM(c.Certificate)
	if err != nil {
		return
	}
	if err := r.a.store.SaveCredentials(key, c.Certificate); err != nil {
		r.a.log.Error(err, "Saving rotated certificate")
		return
	}
	r.mu.Lock()
	r.leaf = leaf
	r.mu.Unlock()
	r.a.rotations.Add(1)
	r.a.log.Info("Rotated client certificate", "notAfter", leaf.NotAfter)
	select {
	case r.got <- struct{}{}:
	default:
	}
}

// holdsWorkload tells whether the agent has a workload on record (a
// bootstrap that ran, or a reset not yet done).
func (a *Agent) holdsWorkload() bool {
	applied, err := a.store.LoadApplied()
	return err != nil || applied.Workload != nil
}
