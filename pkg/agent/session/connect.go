package session

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/yamux"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/agent/state"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
)

// errRevoked: the hub refused this host's identity (403, or ErrRevoked on
// the session).
var errRevoked = errors.New("the hub revoked this host's identity")

// errUnknownHost: the hub has no EdgeHost of this identity's name (404,
// UnknownHost): a hub restored from a backup without it, or a deletion
// while the agent was away. The identity, and the workload, are kept.
var errUnknownHost = errors.New("the hub has no EdgeHost for this host (restored from a backup without it, or deleted): keeping the identity and retrying")

// unsupportedError: the hub and this agent share no protocol version. It
// is not the host's fault and no retry soon will change it.
type unsupportedError struct{ msg string }

func (e *unsupportedError) Error() string { return e.msg }

// credentials is what a session is opened with.
type credentials struct {
	id   state.Identity
	pair tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
}

// connectOnce enrolls if the host has no identity, then runs one session
// until it ends.
func (s *Source) connectOnce(ctx context.Context) error {
	creds, err := s.credentials(ctx)
	if err != nil {
		return err
	}
	mux, err := s.dial(ctx, creds)
	if err != nil {
		return err
	}
	defer mux.Close()
	s.mux.Store(mux)
	defer s.mux.Store(nil)
	ctrl, err := s.hello(mux, creds.id)
	if err != nil {
		return err
	}
	s.sessions.Add(1)
	s.connected.Store(true)
	s.log.Info("Connected to hub", "hub", s.opts.Hub, "EdgeHost", creds.id.Namespace+"/"+creds.id.Host)
	s.announce("connected to " + s.opts.Hub + " as " + creds.id.Namespace + "/" + creds.id.Host)

	sessCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { <-sessCtx.Done(); _ = mux.Close() }()
	if !s.send(ctx, Update{Op: OpConnected, Report: func(st *wire.Status) error { return ctrl.send(st) },
		Send: func(msg any) error { return ctrl.send(msg) }}) {
		return ctx.Err()
	}
	if s.opts.Streams != nil {
		go s.opts.Streams(sessCtx, mux)
	}
	return s.read(sessCtx, ctrl, newRotator(s, ctrl, creds.leaf))
}

// credentials loads the host's identity, enrolling first if it has none.
func (s *Source) credentials(ctx context.Context) (*credentials, error) {
	stored, err := s.store.LoadIdentity()
	if errors.Is(err, state.ErrNotEnrolled) {
		if err := s.Enroll(ctx); err != nil {
			return nil, err
		}
		if stored, err = s.store.LoadIdentity(); err != nil {
			return nil, fmt.Errorf("reading identity after enrollment: %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading identity: %w", err)
	}
	pair, err := stored.TLSCertificate()
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(stored.CAPEM) {
		return nil, errors.New("stored hub CA is unreadable")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("stored client certificate: %w", err)
	}
	return &credentials{id: stored.Identity, pair: pair, leaf: leaf, pool: pool}, nil
}

// dial opens the websocket to the hub and the yamux session over it.
func (s *Source) dial(ctx context.Context, creds *credentials) (*yamux.Session, error) {
	// reached: the hub accepted the TCP connection (what follows, if it
	// fails, failed at a hub that is up).
	var reached atomic.Bool
	dialer := websocket.Dialer{
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := s.opts.Dial(ctx, network, addr)
			reached.Store(err == nil)
			return c, err
		},
		HandshakeTimeout: 15 * time.Second,
		TLSClientConfig:  hubTLS(creds.pool, s.opts.Hub, creds.pair),
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  4 << 10,
	}
	url := "wss://" + strings.TrimPrefix(strings.TrimSuffix(s.opts.Hub, "/"), "https://") + wire.PathConnect
	ws, resp, err := dialer.DialContext(ctx, url, http.Header{"User-Agent": {"fleet-agent/" + version.Version}})
	if err != nil {
		return nil, dialError(err, resp, reached.Load())
	}
	mux, err := transport.Client(transport.NewConn(ws), s.opts.KeepAlive)
	if err != nil {
		_ = ws.Close()
		return nil, fmt.Errorf("starting the session: %w", err)
	}
	return mux, nil
}

// dialError tells why a dial failed: revoked, busy, a hub that accepted
// the connection and did not serve it, or anything else.
func dialError(err error, resp *http.Response, reached bool) error {
	if resp != nil && resp.StatusCode == http.StatusForbidden {
		return errRevoked
	}
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return errUnknownHost
	}
	if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
		return &busyError{after: retryAfter(resp.Header)}
	}
	if resp != nil {
		return fmt.Errorf("connecting to hub: %s", resp.Status)
	}
	if reached && (transport.ClosedUnserved(err) || errors.Is(err, context.DeadlineExceeded)) {
		return &unservedError{err: err}
	}
	return fmt.Errorf("connecting to hub: %w", err)
}

// hello opens the control stream and says Hello on it.
func (s *Source) hello(mux *yamux.Session, id state.Identity) (*control, error) {
	stream, err := mux.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("opening control stream: %w", err)
	}
	generation := int64(0)
	if s.opts.Generation != nil {
		if generation, err = s.opts.Generation(id.UID); err != nil {
			return nil, err
		}
	}
	// Until the hub's first frame says which version the session speaks,
	// the agent writes its oldest; the Hello itself is always version 1,
	// the one every hub reads.
	ctrl := &control{conn: stream}
	ctrl.version.Store(wire.MinProtocol)
	speaks := wire.Speaks
	if err := ctrl.sendAs(1, &wire.Hello{AgentVersion: s.opts.Version, Host: id.Host, ObservedGeneration: generation,
		Capabilities: append(append([]string{wire.CapabilityTunnel}, s.opts.Capabilities...), s.extra...), Protocols: &speaks}); err != nil {
		return nil, fmt.Errorf("sending Hello: %w", err)
	}
	return ctrl, nil
}

// read hands what the hub sends on the control stream to the sync loop
// (desired states) and the rotator (certificates) until the session ends.
// The rotator starts once the hub's first frame is read: a Welcome tells
// the hub's clock, which rotations are timed by.
func (s *Source) read(ctx context.Context, ctrl *control, rot *rotator) error {
	rotating := rot == nil
	for {
		frame, err := wire.ReadFrame(ctrl.conn, wire.MaxFrameSize)
		if err != nil {
			return fmt.Errorf("session: %w", err)
		}
		msg, v, err := wire.DecodeVersion(frame)
		if err != nil {
			var we *wire.Error
			if errors.As(err, &we) {
				_ = ctrl.send(we)
				if we.Code == wire.ErrUnsupportedProtocol {
					return &unsupportedError{msg: fmt.Sprintf("the hub speaks no protocol version this agent (fleet-agent %s) speaks, %s: %s; upgrade the hub (docs/PROTOCOL.md, \"Version skew\")",
						version.Version, wire.Speaks, we.Message)}
				}
			}
			return fmt.Errorf("hub sent a bad frame: %w", err)
		}
		if !ctrl.agreed {
			// A hub of version 2 or later opens with Welcome; an older one
			// with whatever it has to say, in version 1.
			ctrl.agreed = true
			ctrl.version.Store(int32(v))
		}
		switch m := msg.(type) {
		case *wire.Welcome:
			s.log.Info("Hub welcomed this agent", "protocol", wire.ProtocolName(v), "hubVersion", m.HubVersion)
			if m.Time != nil {
				s.learnHubClock(m.Time.Time)
			}
		case *wire.DesiredState:
			if !s.send(ctx, Update{Op: OpDesired, Desired: m}) {
				return ctx.Err()
			}
		case *wire.Certificate:
			rot.received(m)
		case *wire.Error:
			if m.Code == wire.ErrRevoked {
				return errRevoked
			}
			if m.Code == wire.ErrUnsupportedProtocol {
				return &unsupportedError{msg: "the hub refused this agent's protocol versions: " + m.Message}
			}
			if m.Code == wire.ErrUnknownHost {
				s.log.Info("Hub no longer has this host", "message", m.Message)
				return errUnknownHost
			}
			if m.Code == wire.ErrRejected {
				s.log.Info("Hub rejected a request", "message", m.Message)
				if m.SHA256 != "" && s.opts.TransferRefused != nil {
					s.opts.TransferRefused(m.SHA256, m.Message)
				}
				continue
			}
			return fmt.Errorf("hub closed the session: %w", m)
		default:
			_ = ctrl.send(&wire.Error{Code: wire.ErrUnexpected, Message: "agents do not accept this message"})
			return fmt.Errorf("hub sent an unexpected %T", msg)
		}
		if !rotating {
			rotating = true
			go rot.run(ctx)
		}
	}
}

// control is the session's control stream; sends come from the status
// manager, the rotator and the reader, one at a time.
type control struct {
	mu   sync.Mutex
	conn net.Conn
	// version is the protocol version sends are written in.
	version atomic.Int32
	// agreed is set once the hub's first frame fixed the version; only
	// the reader touches it.
	agreed bool
}

func (c *control) send(msg any) error { return c.sendAs(int(c.version.Load()), msg) }

func (c *control) sendAs(v int, msg any) error {
	frame, err := wire.EncodeAs(v, msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	return wire.WriteFrame(c.conn, frame)
}
