package reach

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/sessions"
	"github.com/edgefleet/fleet/pkg/transport"
)

// MaxTunnelsPerAgent is how many tunnels the hub puts on one agent at once;
// it matches what an agent accepts.
const MaxTunnelsPerAgent = 32

// Dialer opens connections into edge clusters through the sessions this
// replica holds with their agents. It is the proxy's ClusterDialer.
type Dialer struct {
	client   client.Client
	resolver *Resolver
	sessions *sessions.Registry
}

// NewDialer returns a Dialer over the sessions of reg; c reads the
// informer cache.
func NewDialer(c client.Client, resolver *Resolver, reg *sessions.Registry) *Dialer {
	return &Dialer{client: c, resolver: resolver, sessions: reg}
}

// ErrNoAgent means no agent of the cluster that can carry tunnels is
// connected to this replica.
type ErrNoAgent struct {
	Namespace, Cluster string
	// TooOld counts connected agents that predate tunnels.
	TooOld int
}

func (e *ErrNoAgent) Error() string {
	msg := fmt.Sprintf("no agent of cluster %s/%s is connected to the hub", e.Namespace, e.Cluster)
	if e.TooOld > 0 {
		msg += fmt.Sprintf(" (%d connected agents are too old to carry tunnels: upgrade fleet-agent)", e.TooOld)
	}
	return msg
}

// TunnelError is a dial that every candidate agent refused or failed.
type TunnelError struct {
	Namespace, Cluster string
	// Reason is the last failure's kind: agent_refused, dial_failed,
	// agent_busy or session_error.
	Reason string
	Err    error
}

func (e *TunnelError) Error() string {
	return fmt.Sprintf("reaching cluster %s/%s through its agents: %v", e.Namespace, e.Cluster, e.Err)
}

func (e *TunnelError) Unwrap() error { return e.Err }

// DialCluster opens a tunnel to target through a connected agent of the
// cluster: control-plane hosts first (the endpoint is local to them), the
// least busy first among equals, the next one when a dial fails. The
// caller has already checked that target is the cluster's endpoint; the
// agent checks it again against what the hub told it.
func (s *Dialer) DialCluster(ctx context.Context, namespace, cluster, target string) (net.Conn, string, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := s.client.List(ctx, hosts, client.InNamespace(namespace),
		client.MatchingLabels{infrav1.ClusterLabel: cluster}); err != nil {
		return nil, "", fmt.Errorf("listing the hosts of cluster %s/%s: %w", namespace, cluster, err)
	}
	type candidate struct {
		ss *sessions.Session
		cp bool
	}
	var cands []candidate
	tooOld := 0
	for i := range hosts.Items {
		h := &hosts.Items[i]
		ss := s.sessions.Lookup(namespace, h.Name)
		switch {
		case ss == nil:
		case !s.resolver.claimedFor(ctx, h, cluster):
			// Labels alone say nothing: a token or a hand edit can set them.
		case !ss.TunnelCapable():
			// An agent older than tunnels never accepts a stream.
			tooOld++
		default:
			cands = append(cands, candidate{ss, h.Labels[infrav1.ControlPlaneLabel] == "true"})
		}
	}
	if len(cands) == 0 {
		return nil, "", &ErrNoAgent{Namespace: namespace, Cluster: cluster, TooOld: tooOld}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].cp != cands[j].cp {
			return cands[i].cp
		}
		return cands[i].ss.OpenStreams() < cands[j].ss.OpenStreams()
	})
	var last *TunnelError
	for _, c := range cands {
		conn, err := openTunnel(ctx, c.ss, target)
		if err == nil {
			return conn, c.ss.Peer().ID.Name, nil
		}
		last = &TunnelError{Namespace: namespace, Cluster: cluster, Reason: tunnelFailureReason(err),
			Err: fmt.Errorf("via EdgeHost %s: %w", c.ss.Peer().ID.Name, err)}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", last
}

func tunnelFailureReason(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, sessions.ErrStreamBudget):
		return "agent_busy"
	case errors.As(err, &we) && we.Code == wire.ErrDialFailed:
		return "dial_failed"
	case errors.As(err, &we) && we.Code == wire.ErrRejected:
		return "agent_busy"
	case errors.As(err, &we):
		return "agent_refused"
	default:
		return "session_error"
	}
}

// openTunnel opens a stream to the agent of ss and asks it to dial target.
// The stream is returned once the agent says the dial worked.
func openTunnel(ctx context.Context, ss *sessions.Session, target string) (net.Conn, error) {
	st, release, err := ss.OpenStream(MaxTunnelsPerAgent)
	if err != nil {
		return nil, err
	}
	conn := &tunnelConn{Conn: st, release: release}
	deadline := time.Now().Add(2 * transport.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	fail := func(err error) (net.Conn, error) {
		_ = conn.Close()
		return nil, err
	}
	frame, err := wire.EncodeAs(ss.Protocol(), &wire.Tunnel{Target: target})
	if err != nil {
		return fail(err)
	}
	if err := wire.WriteFrame(st, frame); err != nil {
		return fail(fmt.Errorf("asking for a tunnel: %w", err))
	}
	reply, err := wire.ReadFrame(st, wire.MaxTunnelFrameSize)
	if err != nil {
		return fail(fmt.Errorf("waiting for the agent's answer: %w", err))
	}
	msg, err := wire.Decode(reply)
	if err != nil {
		return fail(err)
	}
	switch m := msg.(type) {
	case *wire.TunnelReady:
		_ = st.SetDeadline(time.Time{})
		return conn, nil
	case *wire.Error:
		return fail(m)
	default:
		return fail(fmt.Errorf("agent answered a tunnel with %T", msg))
	}
}

// tunnelConn is a tunnel stream that frees its place in the session's
// tunnel budget when it is closed for good. CloseWrite only ends the
// hub-to-agent direction (a stream's Close sends FIN and still reads);
// Close also releases the budget.
type tunnelConn struct {
	net.Conn
	release func()
	once    sync.Once
}

// CloseWrite half-closes the stream.
func (c *tunnelConn) CloseWrite() error { return c.Conn.Close() }

func (c *tunnelConn) Close() error {
	_ = c.Conn.SetDeadline(time.Now())
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
