package gateway

import (
	"context"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// ReachFor is the Reach the gateway would push to h's agent.
func (s *Server) ReachFor(ctx context.Context, h *infrav1.EdgeHost) *wire.Reach {
	return s.resolver.For(ctx, h)
}

// HasSession tells whether the gateway holds a session for the host.
func (s *Server) HasSession(namespace, name string) bool {
	return s.sessions.Lookup(namespace, name) != nil
}

// SessionProtocol is the protocol version of the host's session here, 0
// without one.
func (s *Server) SessionProtocol(namespace, name string) int {
	if ss := s.sessions.Lookup(namespace, name); ss != nil {
		return ss.Protocol()
	}
	return 0
}
