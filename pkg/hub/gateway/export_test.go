package gateway

import (
	"context"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// ReachFor exposes reachFor to the package's external tests.
func (s *Server) ReachFor(ctx context.Context, h *infrav1.EdgeHost) *wire.Reach {
	return s.reachFor(ctx, h)
}

// HasSession tells whether the gateway holds a session for the host.
func (s *Server) HasSession(namespace, name string) bool {
	return s.sessionFor(namespace, name) != nil
}
