package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
	"github.com/edgefleet/fleet/pkg/transport"
)

// MaxTunnelsPerAgent is how many tunnels the hub puts on one agent at once;
// it matches what an agent accepts.
const MaxTunnelsPerAgent = 32

// reachFor computes how h's cluster endpoint is reached at its site, from
// the informer cache alone: the endpoint of the Cluster its machine
// belongs to, resolved to the cluster's provisioned control-plane hosts.
// A control-plane host resolves it to itself (127.0.0.1) first once its
// own API server runs — or while it is the first control-plane host, whose
// kubeadm init needs the name before anything else exists — and to the
// other control-plane hosts while it joins. Tunnels says whether edge
// reach is on for the cluster. nil when h belongs to no cluster or the
// cluster has no endpoint yet.
func (s *Server) reachFor(ctx context.Context, h *infrav1.EdgeHost) *wire.Reach {
	name := h.Labels[infrav1.ClusterLabel]
	if name == "" || !s.claimedFor(ctx, h, name) {
		return nil
	}
	cluster := &clusterv1.Cluster{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: name}, cluster); err != nil {
		return nil
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if !ep.IsValid() {
		return nil
	}
	r := &wire.Reach{Endpoint: net.JoinHostPort(ep.Host, strconv.Itoa(int(ep.Port))),
		Tunnels: cluster.Annotations[infrav1.EdgeReachAnnotation] != "disabled"}
	cps := &infrav1.EdgeHostList{}
	if err := s.client.List(ctx, cps, client.InNamespace(h.Namespace),
		client.MatchingLabels{infrav1.ClusterLabel: name, infrav1.ControlPlaneLabel: "true"}); err != nil {
		return r
	}
	sort.Slice(cps.Items, func(i, j int) bool { return cps.Items[i].Name < cps.Items[j].Name })
	var others []string
	for i := range cps.Items {
		cp := &cps.Items[i]
		if cp.Name == h.Name || inventory.Phase(cp) != infrav1.HostProvisioned || !s.claimedFor(ctx, cp, name) {
			continue
		}
		for _, a := range cp.Status.Addresses {
			if a.Type == infrav1.MachineInternalIP && net.ParseIP(a.Address) != nil && !slices.Contains(others, a.Address) {
				others = append(others, a.Address)
				break
			}
		}
	}
	if h.Labels[infrav1.ControlPlaneLabel] == "true" && (inventory.Phase(h) == infrav1.HostProvisioned || len(others) == 0) {
		r.Addresses = append(r.Addresses, "127.0.0.1")
	}
	r.Addresses = append(r.Addresses, others...)
	if len(r.Addresses) > wire.MaxReachAddresses {
		r.Addresses = r.Addresses[:wire.MaxReachAddresses]
	}
	return r
}

// claimedFor tells whether h is claimed by a machine of cluster: its claim
// names an EdgeMachine that exists with the claim's uid and belongs to the
// cluster. Only such a host may carry the cluster's traffic or be where its
// endpoint resolves; membership labels are a selector's convenience.
func (s *Server) claimedFor(ctx context.Context, h *infrav1.EdgeHost, cluster string) bool {
	claim := h.Spec.ClaimRef
	if claim == nil {
		return false
	}
	em := &infrav1.EdgeMachine{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: claim.Name}, em); err != nil {
		return false
	}
	return em.UID == claim.UID && em.Labels[clusterv1.ClusterNameLabel] == cluster
}

// kickCluster asks every session of a cluster's hosts to recompute its
// desired state: the cluster's endpoint or control-plane hosts changed,
// and with them every member's Reach.
func (s *Server) kickCluster(namespace, cluster string) {
	if cluster == "" {
		return
	}
	hosts := &infrav1.EdgeHostList{}
	if err := s.client.List(context.Background(), hosts, client.InNamespace(namespace),
		client.MatchingLabels{infrav1.ClusterLabel: cluster}); err != nil {
		return
	}
	now := time.Now()
	for i := range hosts.Items {
		if ss := s.sessionFor(namespace, hosts.Items[i].Name); ss != nil {
			ss.kickPush(now)
		}
	}
}

// membersChanged kicks the sessions of the clusters whose Reach an event on
// a host can change: it is, or was, one of their control-plane hosts, and
// its membership, claim or addresses changed.
func (s *Server) membersChanged(oldObj, obj any) {
	old, _ := oldObj.(*infrav1.EdgeHost)
	if tomb, ok := oldObj.(toolscache.DeletedFinalStateUnknown); ok {
		old, _ = tomb.Obj.(*infrav1.EdgeHost)
	}
	cur, _ := obj.(*infrav1.EdgeHost)
	if old != nil && cur != nil && old.Labels[infrav1.ClusterLabel] == cur.Labels[infrav1.ClusterLabel] &&
		old.Labels[infrav1.ControlPlaneLabel] == cur.Labels[infrav1.ControlPlaneLabel] &&
		(old.Spec.ClaimRef == nil) == (cur.Spec.ClaimRef == nil) &&
		inventory.Phase(old) == inventory.Phase(cur) &&
		equality.Semantic.DeepEqual(old.Status.Addresses, cur.Status.Addresses) {
		return
	}
	var done []string
	for _, h := range []*infrav1.EdgeHost{old, cur} {
		if h == nil || h.Labels[infrav1.ControlPlaneLabel] != "true" {
			continue
		}
		key := h.Namespace + "/" + h.Labels[infrav1.ClusterLabel]
		if !slices.Contains(done, key) {
			done = append(done, key)
			s.kickCluster(h.Namespace, h.Labels[infrav1.ClusterLabel])
		}
	}
}

// clusterChanged kicks a cluster's sessions when its endpoint or its edge
// reach setting changes.
func (s *Server) clusterChanged(oldObj, obj any) {
	cur, ok := obj.(*clusterv1.Cluster)
	if !ok {
		return
	}
	if old, ok := oldObj.(*clusterv1.Cluster); ok && old.Spec.ControlPlaneEndpoint == cur.Spec.ControlPlaneEndpoint &&
		old.Annotations[infrav1.EdgeReachAnnotation] == cur.Annotations[infrav1.EdgeReachAnnotation] {
		return
	}
	s.kickCluster(cur.Namespace, cur.Name)
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
func (s *Server) DialCluster(ctx context.Context, namespace, cluster, target string) (net.Conn, string, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := s.client.List(ctx, hosts, client.InNamespace(namespace),
		client.MatchingLabels{infrav1.ClusterLabel: cluster}); err != nil {
		return nil, "", fmt.Errorf("listing the hosts of cluster %s/%s: %w", namespace, cluster, err)
	}
	type candidate struct {
		ss *session
		cp bool
	}
	var cands []candidate
	tooOld := 0
	for i := range hosts.Items {
		h := &hosts.Items[i]
		ss := s.sessionFor(namespace, h.Name)
		switch {
		case ss == nil:
		case !s.claimedFor(ctx, h, cluster):
			// Labels alone say nothing: a token or a hand edit can set them.
		case !ss.tunnelCapable:
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
		return cands[i].ss.tunnels.Load() < cands[j].ss.tunnels.Load()
	})
	var last *TunnelError
	for _, c := range cands {
		conn, err := c.ss.openTunnel(ctx, target)
		if err == nil {
			return conn, c.ss.id.Name, nil
		}
		last = &TunnelError{Namespace: namespace, Cluster: cluster, Reason: tunnelFailureReason(err),
			Err: fmt.Errorf("via EdgeHost %s: %w", c.ss.id.Name, err)}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", last
}

var errAgentBusy = errors.New("the agent carries its maximum of tunnels")

func tunnelFailureReason(err error) string {
	var we *wire.Error
	switch {
	case errors.Is(err, errAgentBusy):
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

// openTunnel opens a stream to the agent and asks it to dial target. The
// stream is returned once the agent says the dial worked.
func (ss *session) openTunnel(ctx context.Context, target string) (net.Conn, error) {
	if n := ss.tunnels.Add(1); n > MaxTunnelsPerAgent {
		ss.tunnels.Add(-1)
		return nil, errAgentBusy
	}
	st, err := ss.mux.Open()
	if err != nil {
		ss.tunnels.Add(-1)
		return nil, fmt.Errorf("opening a stream: %w", err)
	}
	conn := &tunnelConn{Conn: st, release: func() { ss.tunnels.Add(-1) }}
	deadline := time.Now().Add(2 * transport.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = st.SetDeadline(deadline)
	fail := func(err error) (net.Conn, error) {
		_ = conn.Close()
		return nil, err
	}
	frame, err := wire.Encode(&wire.Tunnel{Target: target})
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
		return fail(fmt.Errorf("agent answered a tunnel with %s", typeName(msg)))
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
