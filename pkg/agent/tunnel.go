package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
)

// Tunnel limits. A tunnel carries one connection of the hub's (Cluster
// API's, or an operator's kubectl) to this host's cluster API endpoint.
const (
	// MaxTunnels bounds the tunnels one agent carries at once; the hub
	// spreads beyond that over the cluster's other agents.
	MaxTunnels = 32
	// TunnelDialTimeout bounds the dial of the endpoint.
	TunnelDialTimeout = 10 * time.Second
	// TunnelIdleTimeout closes a tunnel that carried nothing either way
	// for this long. Kubernetes clients keep their connections alive with
	// HTTP/2 pings well within it.
	TunnelIdleTimeout = 5 * time.Minute
	// TunnelHalfCloseTimeout closes a tunnel this long after one direction
	// ended, if the other has not; yamux resets a half-closed stream after
	// the same time.
	TunnelHalfCloseTimeout = transport.WriteTimeout
)

// tunnels serves the streams the hub opens on a session: each asks for a
// connection to the cluster's API endpoint, the one target allowed.
type tunnels struct {
	a      *Agent
	open   atomic.Int32
	served atomic.Int64
	// refused counts tunnel requests turned down (wrong target, limit).
	refused atomic.Int64
}

// accept serves streams until the session ends.
func (t *tunnels) accept(ctx context.Context, mux *yamux.Session) {
	for {
		st, err := mux.AcceptStreamWithContext(ctx)
		if err != nil {
			return
		}
		go t.serve(st)
	}
}

func (t *tunnels) serve(st *yamux.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(TunnelDialTimeout))
	frame, err := wire.ReadFrame(st, wire.MaxTunnelFrameSize)
	if err != nil {
		t.refuse(st, wire.ErrBadFrame, "reading the tunnel request: "+err.Error())
		return
	}
	msg, err := wire.Decode(frame)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			t.refuse(st, we.Code, we.Message)
		}
		return
	}
	req, ok := msg.(*wire.Tunnel)
	if !ok {
		t.refuse(st, wire.ErrUnexpected, "a stream opened by the hub must start with Tunnel")
		return
	}
	addrs, err := t.a.dialTargets(req.Target)
	if err != nil {
		t.refuse(st, wire.ErrForbidden, err.Error())
		return
	}
	if n := t.open.Add(1); n > MaxTunnels {
		t.open.Add(-1)
		t.refuse(st, wire.ErrRejected, fmt.Sprintf("this agent already carries %d tunnels", MaxTunnels))
		return
	}
	defer t.open.Add(-1)

	conn, err := dialFirst(addrs)
	if err != nil {
		t.a.log.Info("Tunnel dial failed", "target", req.Target, "error", err.Error())
		_ = writeMsg(st, &wire.Error{Code: wire.ErrDialFailed, Message: err.Error()})
		return
	}
	defer conn.Close()
	if err := writeMsg(st, &wire.TunnelReady{Address: conn.RemoteAddr().String()}); err != nil {
		return
	}
	_ = st.SetDeadline(time.Time{})
	t.served.Add(1)
	transport.Pipe(st, conn, TunnelIdleTimeout, TunnelHalfCloseTimeout)
}

func (t *tunnels) refuse(st net.Conn, code wire.ErrorCode, msg string) {
	t.refused.Add(1)
	t.a.log.Info("Refused a tunnel", "code", string(code), "reason", msg)
	_ = writeMsg(st, &wire.Error{Code: code, Message: msg})
}

func writeMsg(c net.Conn, msg any) error {
	frame, err := wire.Encode(msg)
	if err != nil {
		return err
	}
	_ = c.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	return wire.WriteFrame(c, frame)
}

// dialTargets checks a tunnel target against the cluster this host belongs
// to and returns the addresses to dial for it. Anything but the cluster's
// own API endpoint is refused: the hub must never be able to use an agent
// to reach the rest of the site's network.
func (a *Agent) dialTargets(target string) ([]string, error) {
	r := a.reach.Load()
	if r == nil {
		return nil, fmt.Errorf("this host belongs to no cluster; it dials nothing")
	}
	if !r.Tunnels {
		return nil, fmt.Errorf("edge reach is disabled for this host's cluster")
	}
	if target != r.Endpoint {
		return nil, fmt.Errorf("target %q is not this host's cluster endpoint", target)
	}
	host, port, err := net.SplitHostPort(r.Endpoint)
	if err != nil {
		return nil, err
	}
	if !managedName(host) || len(r.Addresses) == 0 {
		// An address, or a name the site's own DNS answers for.
		return []string{r.Endpoint}, nil
	}
	out := make([]string, 0, len(r.Addresses))
	for _, ip := range r.Addresses {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out, nil
}

// managedName tells whether host is in fleet's own endpoint zone, which
// only the agents resolve.
func managedName(host string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+infrav1.EndpointDomain)
}

func dialFirst(addrs []string) (net.Conn, error) {
	d := net.Dialer{Timeout: TunnelDialTimeout / time.Duration(max(1, len(addrs)))}
	var errs []error
	for _, addr := range addrs {
		c, err := d.Dial("tcp", addr)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
