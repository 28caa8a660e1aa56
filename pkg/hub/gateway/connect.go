package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
	"github.com/edgefleet/fleet/pkg/transport/hubmux"
)

var upgrader = websocket.Upgrader{
	HandshakeTimeout: 10 * time.Second,
	// The session reads frames itself (transport.HubConn), not through
	// gorilla's reader; a read buffer size is still needed, for gorilla
	// then hands bytes the agent sent early over with the connection
	// rather than keep them in the HTTP server's 4 KiB buffer (which is
	// then freed). 128 bytes is gorilla's floor. The pool lends a write
	// buffer only while a frame is written. An idle session keeps few
	// buffers of its own (a hub holds thousands).
	ReadBufferSize:  128,
	WriteBufferSize: 0,
	WriteBufferPool: &sync.Pool{},
	// Agents are not browsers and send no Origin. A request that carries
	// one comes from a browser and is refused (cross-site websocket
	// hijacking), on top of the client certificate.
	CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" },
}

// serveConnect authenticates the client certificate, admits the handshake,
// upgrades, and runs the session until it ends.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	id, err := s.authenticate(r)
	if err != nil {
		code, status := "Unauthorized", http.StatusUnauthorized
		if errors.Is(err, errRevoked) {
			code, status = string(wire.ErrRevoked), http.StatusForbidden
			handshakes.WithLabelValues("revoked").Inc()
		} else {
			handshakes.WithLabelValues("no_certificate").Inc()
		}
		writeError(w, status, code, err.Error())
		return
	}
	if !s.admit(r.Context()) {
		handshakes.WithLabelValues("busy").Inc()
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, "Busy", "too many handshakes in progress; retry later")
		return
	}
	admitted := true
	release := func() {
		if admitted {
			admitted = false
			<-s.admission
		}
	}
	defer release()

	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		handshakes.WithLabelValues("upgrade_failed").Inc()
		return
	}
	conn := transport.NewHubConn(ws, s.opts.AgentIdleTimeout)
	mux := hubmux.Server(conn, hubmux.Config{
		CloseTimeout: transport.WriteTimeout,
		// Only the hub opens tunnels.
		OnRefusedStream: func() { rejectedFrames.WithLabelValues("UnexpectedStream").Inc() },
	})
	// The session's one goroutine from now on (parked on the socket while
	// the agent is quiet: see hubmux.Session.Start). This handler returns once
	// the session is registered: net/http's goroutine for the connection
	// (its stack grown by the TLS handshake) and the request it holds are
	// freed, and the hijacked connection is the session's alone.
	mux.Start()
	ss := newSession(s, id, mux)
	if err := ss.handshake(s.opts.HelloTimeout); err != nil {
		handshakes.WithLabelValues("bad_hello").Inc()
		s.log.Info("Rejected session", "EdgeHost", id.String(), "reason", err.Error())
		ss.close()
		return
	}
	release()
	handshakes.WithLabelValues("ok").Inc()
	s.register(ss)
	if s.ctx.Err() != nil {
		// The hub is stopping: Start closed the sessions it knew of
		// before this one registered.
		s.unregister(ss)
		return
	}
	ss.start(s.ctx)
}

// admit takes a handshake slot, waiting a moment for one: the agent has
// already paid for its TLS handshake, the dearest part of connecting, and
// in a crowd a slot frees within milliseconds. Turning it away at once
// would make it pay again after its Retry-After.
func (s *Server) admit(ctx context.Context) bool {
	return takePlace(ctx, s.admission, s.opts.HelloTimeout/2)
}

// takePlace takes a place in places, waiting up to wait (none if wait is
// not positive) or until ctx ends.
func takePlace(ctx context.Context, places chan struct{}, wait time.Duration) bool {
	select {
	case places <- struct{}{}:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case places <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

var errRevoked = errors.New("host identity revoked: its EdgeHost was deleted; enroll again")

// authenticate maps the verified client certificate to a live EdgeHost.
// The certificate names the EdgeHost down to its uid, so a host deleted and
// re-created under the same name does not accept the old certificate.
func (s *Server) authenticate(r *http.Request) (pki.Identity, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return pki.Identity{}, errors.New("a client certificate from the hub CA is required; enroll first")
	}
	id, err := pki.IdentityFromCert(r.TLS.PeerCertificates[0])
	if err != nil {
		return pki.Identity{}, err
	}
	key := client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
	host := &infrav1.EdgeHost{}
	err = s.client.Get(r.Context(), key, host)
	if err == nil && string(host.UID) != id.UID || apierrors.IsNotFound(err) {
		// The cache may not have seen a host enrolled a moment ago: ask
		// the API server before telling an agent it is revoked (it would
		// throw its identity away).
		err = s.apiReader.Get(r.Context(), key, host)
	}
	if apierrors.IsNotFound(err) {
		return pki.Identity{}, errRevoked
	}
	if err != nil {
		return pki.Identity{}, fmt.Errorf("looking up EdgeHost %s: %w", id, err)
	}
	// A terminating host stays reachable: its agent must be able to reset
	// it, or the protection finalizer would never let it go.
	if string(host.UID) != id.UID {
		return pki.Identity{}, errRevoked
	}
	return id, nil
}

func (s *Server) register(ss *session) {
	s.mu.Lock()
	old := s.sessions[ss.id.String()]
	s.sessions[ss.id.String()] = ss
	pending := s.pendingDisconnect[ss.id.String()]
	delete(s.pendingDisconnect, ss.id.String())
	s.mu.Unlock()
	if pending != nil && pending.Stop() {
		// Back within the grace: the host never read as disconnected.
		skippedStatusWrites.WithLabelValues("disconnected").Inc()
	}
	if old != nil {
		// The agent reconnected before the old session timed out.
		old.replaced.Store(true)
		old.close()
	} else {
		connectedAgents.Inc()
	}
	// The desired state first: recording the connection (the session's
	// goroutine does it) is an API write that may wait its turn behind
	// thousands of others after a restart.
	ss.kickPush(time.Now())
}

func (s *Server) unregister(ss *session) {
	ss.close()
	s.mu.Lock()
	current := s.sessions[ss.id.String()] == ss
	if current {
		delete(s.sessions, ss.id.String())
	}
	s.mu.Unlock()
	if current {
		connectedAgents.Dec()
		s.disconnectLater(ss)
	}
}

// disconnectLater records the host as disconnected once DisconnectGrace
// has passed without a new session. A hub that stops records nothing: its
// agents come back to a replica that records them connected.
func (s *Server) disconnectLater(ss *session) {
	if s.opts.DisconnectGrace < 0 {
		s.markDisconnected(context.Background(), ss)
		return
	}
	key := ss.id.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.pendingDisconnect[key]; old != nil {
		old.Stop()
	}
	var t *time.Timer
	t = time.AfterFunc(s.opts.DisconnectGrace, func() {
		s.mu.Lock()
		mine := s.pendingDisconnect[key] == t && s.sessions[key] == nil
		if s.pendingDisconnect[key] == t {
			delete(s.pendingDisconnect, key)
		}
		s.mu.Unlock()
		if !mine || s.ctx.Err() != nil {
			return // the agent is back, or the hub is stopping
		}
		s.markDisconnected(context.Background(), ss)
	})
	s.pendingDisconnect[key] = t
}

func (s *Server) sessionFor(namespace, name string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[namespace+"/"+name]
}

// hostChanged pushes the new desired state to the host's session, if any.
func (s *Server) hostChanged(obj any) {
	h, ok := obj.(*infrav1.EdgeHost)
	if !ok {
		return
	}
	ss := s.sessionFor(h.Namespace, h.Name)
	if ss == nil {
		return
	}
	if string(h.UID) != ss.id.UID {
		// Not on the informer's goroutine: telling a stuck peer may block
		// for a write timeout.
		go ss.revoke()
		return
	}
	ss.kickPush(time.Now())
}

// hostDeleted cuts a deleted host off.
func (s *Server) hostDeleted(obj any) {
	h, ok := obj.(*infrav1.EdgeHost)
	if !ok {
		if tomb, isTomb := obj.(toolscache.DeletedFinalStateUnknown); isTomb {
			h, ok = tomb.Obj.(*infrav1.EdgeHost)
		}
		if !ok {
			return
		}
	}
	if ss := s.sessionFor(h.Namespace, h.Name); ss != nil {
		go ss.revoke()
	}
	s.mu.Lock()
	if t := s.pendingDisconnect[h.Namespace+"/"+h.Name]; t != nil {
		t.Stop()
		delete(s.pendingDisconnect, h.Namespace+"/"+h.Name)
	}
	s.mu.Unlock()
	s.wroteDisconnect.Delete(h.Namespace + "/" + h.Name)
}
