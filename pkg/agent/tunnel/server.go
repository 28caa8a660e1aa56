package tunnel

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/streams"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/transport"
)

// Tunnel limits. A tunnel carries one connection of the hub's (Cluster
// API's, or an operator's kubectl) to this host's cluster API endpoint.
const (
	// MaxOpen bounds the tunnels one agent carries at once; the hub
	// spreads beyond that over the cluster's other agents.
	MaxOpen = 32
	// DialTimeout bounds the dial of the endpoint.
	DialTimeout = 10 * time.Second
	// IdleTimeout closes a tunnel that carried nothing either way for this
	// long. Kubernetes clients keep their connections alive with HTTP/2
	// pings well within it.
	IdleTimeout = 5 * time.Minute
	// HalfCloseTimeout closes a tunnel this long after one direction
	// ended, if the other has not; yamux resets a half-closed stream after
	// the same time.
	HalfCloseTimeout = transport.WriteTimeout
)

// Server serves the streams the hub opens on a session: each asks for a
// connection to the cluster's API endpoint, the one target allowed.
type Server struct {
	// Targets checks a requested target and returns the addresses to
	// dial for it (reach.Owner.DialTargets).
	Targets func(target string) ([]string, error)
	// Log hears refusals and failed dials.
	Log logr.Logger

	open   atomic.Int32
	served atomic.Int64
	// refused counts tunnel requests turned down (wrong target, limit).
	refused atomic.Int64
}

// Served counts the tunnels carried so far.
func (t *Server) Served() int64 { return t.served.Load() }

// Refused counts the tunnel requests turned down (wrong target, limit).
func (t *Server) Refused() int64 { return t.refused.Load() }

// Serve carries one tunnel: the stream's first frame, req, asked in
// protocol version v. It closes st.
func (t *Server) Serve(st net.Conn, v int, req *wire.Tunnel) {
	defer st.Close()
	addrs, err := t.Targets(req.Target)
	if err != nil {
		t.refuse(st, v, wire.ErrForbidden, err.Error())
		return
	}
	if n := t.open.Add(1); n > MaxOpen {
		t.open.Add(-1)
		t.refuse(st, v, wire.ErrRejected, fmt.Sprintf("this agent already carries %d tunnels", MaxOpen))
		return
	}
	defer t.open.Add(-1)

	conn, err := dialFirst(addrs)
	if err != nil {
		t.Log.Info("Tunnel dial failed", "target", req.Target, "error", err.Error())
		streams.Refuse(st, v, wire.ErrDialFailed, err.Error())
		return
	}
	defer conn.Close()
	if err := streams.Write(st, v, &wire.TunnelReady{Address: conn.RemoteAddr().String()}); err != nil {
		return
	}
	_ = st.SetDeadline(time.Time{})
	t.served.Add(1)
	transport.Pipe(st, conn, IdleTimeout, HalfCloseTimeout)
}

// Handler is Serve as a streams.Handler.
func (t *Server) Handler(st net.Conn, v int, msg any) { t.Serve(st, v, msg.(*wire.Tunnel)) }

// refuse answers in protocol version v, the version the hub asked in.
func (t *Server) refuse(st net.Conn, v int, code wire.ErrorCode, msg string) {
	t.refused.Add(1)
	t.Log.Info("Refused a tunnel", "code", string(code), "reason", msg)
	streams.Refuse(st, v, code, msg)
}

func dialFirst(addrs []string) (net.Conn, error) {
	d := net.Dialer{Timeout: DialTimeout / time.Duration(max(1, len(addrs)))}
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
