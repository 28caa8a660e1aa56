package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
	peer, err := s.authenticate(r)
	if err != nil {
		code, status := "Unauthorized", http.StatusUnauthorized
		switch {
		case errors.Is(err, errReplaced):
			// Not Revoked: an agent told so forgets its identity, and a
			// replaced certificate is more likely the owner's lost answer
			// (or a thief's rotation) than a revocation.
			code = "CertificateReplaced"
			handshakes.WithLabelValues("replaced").Inc()
			s.log.Info("Refused a certificate that was replaced by a newer one", "EdgeHost", peerName(r), "remote", r.RemoteAddr)
		case errors.Is(err, errRevoked):
			code, status = string(wire.ErrRevoked), http.StatusForbidden
			handshakes.WithLabelValues("revoked").Inc()
			s.log.Info("Refused a revoked host's session", "EdgeHost", peerName(r), "reason", err.Error(), "remote", r.RemoteAddr)
		default:
			handshakes.WithLabelValues("no_certificate").Inc()
		}
		writeError(w, status, code, err.Error())
		return
	}
	id := peer.id
	// An agent sets up one session at a time; more from one identity
	// (a stolen key, or a loop gone wrong) must not take every place.
	if !s.beginSetup(id) {
		handshakes.WithLabelValues("host_busy").Inc()
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, "Busy", "this host already has sessions being set up; retry later")
		return
	}
	settingUp := true
	endSetup := func() {
		if settingUp {
			settingUp = false
			s.endSetup(id)
		}
	}
	defer endSetup()
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
	ss.setKey(peer.key)
	ss.expires.Store(peer.notAfter.UnixNano())
	if err := ss.handshake(s.opts.HelloTimeout); err != nil {
		handshakes.WithLabelValues("bad_hello").Inc()
		s.log.Info("Rejected session", "EdgeHost", id.String(), "reason", err.Error())
		ss.close()
		return
	}
	release()
	endSetup()
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

var (
	errRevoked  = errors.New("host identity revoked: its EdgeHost was deleted; enroll again")
	errDeleting = fmt.Errorf("%w (it is being deleted)", errRevoked)
	errReplaced = errors.New("this certificate was replaced by a newer one (a rotation): only the host's current certificate opens sessions")
)

// MaxSetupsPerHost is how many sessions of one host may be between
// authentication and Hello at once.
const MaxSetupsPerHost = 2

func (s *Server) beginSetup(id pki.Identity) bool {
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	if s.setups[id.String()] >= MaxSetupsPerHost {
		return false
	}
	s.setups[id.String()]++
	return true
}

func (s *Server) endSetup(id pki.Identity) {
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	if s.setups[id.String()]--; s.setups[id.String()] <= 0 {
		delete(s.setups, id.String())
	}
}

// peer is who a verified client certificate speaks for.
type peer struct {
	id pki.Identity
	// key names the certificate's public key; notAfter is its expiry.
	key      string
	notAfter time.Time
}

// authenticate maps the verified client certificate to a live EdgeHost:
// the certificate names the EdgeHost down to its uid (a host deleted and
// re-created under the same name does not accept the old certificate), the
// host is not being deleted (deleting it revokes it), and the certificate's
// key is the host's current one (a rotation retires the one before).
func (s *Server) authenticate(r *http.Request) (peer, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || len(r.TLS.VerifiedChains) == 0 {
		return peer{}, errors.New("a client certificate from the hub CA is required; enroll first")
	}
	leaf := r.TLS.PeerCertificates[0]
	id, err := pki.IdentityFromCert(leaf)
	if err != nil {
		return peer{}, err
	}
	p := peer{id: id, key: pki.CertKeyID(leaf), notAfter: leaf.NotAfter}
	key := client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
	host := &infrav1.EdgeHost{}
	err = s.client.Get(r.Context(), key, host)
	if err == nil && trust(host, p) != nil || apierrors.IsNotFound(err) {
		// The cache may not have seen a host enrolled, or a key rotated, a
		// moment ago: ask the API server before telling an agent it is
		// revoked (it would throw its identity away).
		err = s.apiReader.Get(r.Context(), key, host)
	}
	if apierrors.IsNotFound(err) {
		return peer{}, errRevoked
	}
	if err != nil {
		return peer{}, fmt.Errorf("looking up EdgeHost %s: %w", id, err)
	}
	if err := trust(host, p); err != nil {
		return peer{}, err
	}
	if p.key == host.Annotations[infrav1.ClientKeyAnnotation] && host.Annotations[infrav1.PreviousClientKeyAnnotation] != "" {
		// The agent uses its new certificate: the old one is retired.
		if err := s.setClientKeys(r.Context(), host, p.key, ""); err != nil {
			s.log.Error(err, "Retiring the previous client key", "EdgeHost", id.String())
		}
	}
	return p, nil
}

// trust says why host does not accept p's certificate, or nil.
func trust(host *infrav1.EdgeHost, p peer) error {
	switch {
	case string(host.UID) != p.id.UID:
		return errRevoked
	case !host.DeletionTimestamp.IsZero():
		// Whatever its agent reports: what the finalizer protects is a
		// separate question from whether the identity is still trusted.
		return errDeleting
	}
	cur := host.Annotations[infrav1.ClientKeyAnnotation]
	if cur == "" || p.key == cur {
		return nil // "": enrolled before keys were recorded; its first rotation records one
	}
	if prev, until, ok := previousKey(host); ok && p.key == prev && time.Now().Before(until) {
		return nil
	}
	return errReplaced
}

// previousKey parses PreviousClientKeyAnnotation: "<key> <RFC 3339 time
// until which it is honoured>".
func previousKey(host *infrav1.EdgeHost) (key string, until time.Time, ok bool) {
	key, at, found := strings.Cut(host.Annotations[infrav1.PreviousClientKeyAnnotation], " ")
	if !found {
		return "", time.Time{}, false
	}
	until, err := time.Parse(time.RFC3339, at)
	return key, until, err == nil
}

// setClientKeys records the host's current client key, and the previous
// one ("" for none) with the end of its overlap.
func (s *Server) setClientKeys(ctx context.Context, host *infrav1.EdgeHost, cur, prev string) error {
	if prev != "" {
		prev += " " + time.Now().Add(s.opts.RotationOverlap).UTC().Format(time.RFC3339)
	}
	want := host.DeepCopy()
	if want.Annotations == nil {
		want.Annotations = map[string]string{}
	}
	want.Annotations[infrav1.ClientKeyAnnotation] = cur
	if prev == "" {
		delete(want.Annotations, infrav1.PreviousClientKeyAnnotation)
	} else {
		want.Annotations[infrav1.PreviousClientKeyAnnotation] = prev
	}
	// Optimistic: a patch built from a stale copy must not undo a newer
	// rotation (on another replica).
	p := client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})
	if err := s.client.Patch(ctx, want, p); err != nil {
		return fmt.Errorf("recording the client key of EdgeHost %s/%s: %w", host.Namespace, host.Name, err)
	}
	return nil
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
	switch err := trust(h, peer{id: ss.id, key: ss.keyID()}); {
	case errors.Is(err, errReplaced):
		go s.closeIfReplaced(ss)
		return
	case err != nil:
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

// rotate signs a new client certificate for the session's host and
// records its key as the host's current one before the agent has it. The
// session's key stays valid until the new certificate is first used, for
// RotationOverlap at most: long enough for an agent whose answer was lost
// with its session to come back and ask again. The session itself now
// counts as holding the new key: its holder is the one who received it.
func (s *Server) rotate(ctx context.Context, ss *session, csrPEM []byte) ([]byte, error) {
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	host := &infrav1.EdgeHost{}
	if err := s.apiReader.Get(ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errRevoked
		}
		return nil, fmt.Errorf("reading EdgeHost %s: %w", ss.id, err)
	}
	if err := trust(host, peer{id: ss.id, key: ss.keyID()}); err != nil {
		return nil, err
	}
	next := pki.KeyID(csr)
	if host.Annotations[infrav1.ClientKeyAnnotation] != next {
		if err := s.setClientKeys(ctx, host, next, ss.keyID()); err != nil {
			return nil, errors.New("the hub could not record the new key; retry later")
		}
	}
	cert, err := s.ca.SignClient(csrPEM, ss.id, s.opts.ClientCertValidity)
	if err != nil {
		return nil, err
	}
	ss.expires.Store(time.Now().Add(s.opts.ClientCertValidity).UnixNano())
	ss.setKey(next)
	return cert, nil
}

// peerName is the EdgeHost a request's certificate names, for logs.
func peerName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	id, err := pki.IdentityFromCert(r.TLS.PeerCertificates[0])
	if err != nil {
		return ""
	}
	return id.String()
}

// closeIfReplaced closes the session if the API server confirms what the
// cache said, that its key is no longer the host's: an informer event older
// than a rotation on this very session must not end it. It says nothing a
// holder of the new key could mistake for its own revocation.
func (s *Server) closeIfReplaced(ss *session) {
	host := &infrav1.EdgeHost{}
	if err := s.apiReader.Get(s.ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			ss.revoke()
		}
		return
	}
	switch err := trust(host, peer{id: ss.id, key: ss.keyID()}); {
	case errors.Is(err, errReplaced):
		s.log.Info("Closing a session whose certificate was replaced", "EdgeHost", ss.id.String())
		ss.close()
	case err != nil:
		ss.revoke()
	}
}
