package gateway

import (
	"context"
	"net"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/delivery"
	"github.com/edgefleet/fleet/pkg/hub/sessions"
)

// releaseStreamLimit is how many streams a session may carry when a
// release transfer opens one: tunnels' and host access's budget, and one.
const releaseStreamLimit = 32 + 4 + 1

// releaseDelivery joins the sessions to package delivery.
type releaseDelivery struct {
	orders *delivery.Orders
	server *delivery.Server
}

func (d releaseDelivery) For(ctx context.Context, h *infrav1.EdgeHost) *wire.AgentReleaseOrder {
	return d.orders.For(ctx, h)
}

func (d releaseDelivery) Serve(ss *sessions.Session, req *wire.ReleaseRequest, ordered *wire.AgentReleaseOrder) error {
	return d.server.Serve(transferSession(ss), req, ordered)
}

func (d releaseDelivery) ServeArchive(ss *sessions.Session, req *wire.ReleaseRequest) error {
	return d.server.ServeArchive(transferSession(ss), req)
}

func transferSession(ss *sessions.Session) delivery.Session {
	id := ss.Peer().ID
	return delivery.Session{
		Host: id.Namespace + "/" + id.Name, Namespace: id.Namespace,
		Open:     func() (net.Conn, func(), error) { return ss.OpenStream(releaseStreamLimit) },
		Done:     ss.Done(),
		Protocol: ss.Protocol(),
		Refuse:   ss.RefuseTransfer,
	}
}
