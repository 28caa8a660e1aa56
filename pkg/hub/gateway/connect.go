package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/sessions"
	"github.com/edgefleet/fleet/pkg/pki"
	"github.com/edgefleet/fleet/pkg/transport"
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

func writeError(w http.ResponseWriter, status int, code, msg string) {
	wire.Refusal{Code: code, Message: msg}.Write(w, status)
}

// serveConnect authenticates the client certificate, admits the handshake,
// upgrades, and hands the session to the registry once its Hello is in.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	peer, err := s.authority.Authenticate(r)
	if err != nil {
		s.refuseSession(w, r, err)
		return
	}
	id := peer.ID
	// An agent sets up one session at a time; more from one identity
	// (a stolen key, or a loop gone wrong) must not take every place.
	if !s.beginSetup(id) {
		handshakes.WithLabelValues("host_busy").Inc()
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, "Busy", "this host already has sessions being set up; retry later")
		return
	}
	defer s.endSetup(id)
	// The agent has already paid for its TLS handshake, the dearest part
	// of connecting, and in a crowd a place frees within milliseconds:
	// turning it away at once would make it pay again after Retry-After.
	if !s.handshakes.Take(r.Context(), s.opts.HelloTimeout/2) {
		handshakes.WithLabelValues("busy").Inc()
		w.Header().Set("Retry-After", "2")
		writeError(w, http.StatusServiceUnavailable, "Busy", "too many handshakes in progress; retry later")
		return
	}
	defer s.handshakes.Release()

	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		handshakes.WithLabelValues("upgrade_failed").Inc()
		return
	}
	ss, err := s.sessions.NewSession(transport.NewHubConn(ws, s.opts.AgentIdleTimeout), peer)
	if err != nil {
		handshakes.WithLabelValues("upgrade_failed").Inc()
		s.log.Error(err, "Starting a session", "EdgeHost", id.String())
		_ = ws.Close()
		return
	}
	if err := ss.Handshake(s.opts.HelloTimeout); err != nil {
		var unsupported *sessions.UnsupportedError
		if errors.As(err, &unsupported) {
			handshakes.WithLabelValues("unsupported_agent").Inc()
			s.log.Info("Refused an agent that shares no protocol version with this hub", "EdgeHost", id.String(),
				"agentVersion", ss.AgentVersion(), "reason", unsupported.Reason, "message", unsupported.Message)
			ss.Close()
			// Recorded once the session is closed: the write may wait for
			// a place, and the agent has its answer already.
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.HelloTimeout)
			defer cancel()
			s.sessions.RecordUnsupported(ctx, id, unsupported.Reason, unsupported.Message)
			return
		}
		handshakes.WithLabelValues("bad_hello").Inc()
		s.log.Info("Rejected session", "EdgeHost", id.String(), "reason", err.Error())
		ss.Close()
		return
	}
	handshakes.WithLabelValues("ok").Inc()
	// This handler returns once the session is registered: net/http's
	// goroutine for the connection (its stack grown by the TLS handshake)
	// and the request it holds are freed, and the hijacked connection is
	// the session's alone. Its places are released as it returns.
	s.sessions.Serve(ss)
}

// refuseSession answers a request whose certificate opens no session.
func (s *Server) refuseSession(w http.ResponseWriter, r *http.Request, err error) {
	code, status := "Unauthorized", http.StatusUnauthorized
	switch {
	case errors.Is(err, identity.ErrReplaced):
		// Not Revoked: an agent told so forgets its identity, and a
		// replaced certificate is more likely the owner's lost answer
		// (or a thief's rotation) than a revocation.
		code = "CertificateReplaced"
		handshakes.WithLabelValues("replaced").Inc()
		s.log.Info("Refused a certificate that was replaced by a newer one", "EdgeHost", identity.PeerName(r), "remote", r.RemoteAddr)
	case errors.Is(err, identity.ErrUnknownHost):
		// Not Revoked either: the agent keeps its identity and workload and
		// comes back with backoff, so a restore that brings the EdgeHost
		// back finds it as it was.
		code, status = string(wire.ErrUnknownHost), http.StatusNotFound
		handshakes.WithLabelValues("unknown_host").Inc()
		msg := "Refused a session: no EdgeHost of this name (restore it if the hub was restored from a backup without it)"
		if errors.Is(err, identity.ErrMoved) {
			msg = "Refused a session: its EdgeHost is moving to another hub cluster (clusterctl move)"
		}
		s.log.Info(msg, "EdgeHost", identity.PeerName(r), "remote", r.RemoteAddr)
	case errors.Is(err, identity.ErrRevoked):
		code, status = string(wire.ErrRevoked), http.StatusForbidden
		handshakes.WithLabelValues("revoked").Inc()
		s.log.Info("Refused a revoked host's session", "EdgeHost", identity.PeerName(r), "reason", err.Error(), "remote", r.RemoteAddr)
	default:
		handshakes.WithLabelValues("no_certificate").Inc()
	}
	writeError(w, status, code, err.Error())
}

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
