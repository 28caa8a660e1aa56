package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
)

// Reasons of the AgentConnected condition.
const (
	ConnectedReason    = "Connected"
	DisconnectedReason = "Disconnected"
)

// recordStatus writes the agent's report into EdgeHost status, and only
// when it differs from the last one: an agent re-sending the same status
// (after every reconnect, on its resync timer) costs no API write.
func (s *Server) recordStatus(ctx context.Context, ss *session, st *wire.Status) error {
	digest, err := digestStatus(st)
	if err != nil {
		return err
	}
	last := ss.lastStatus
	if last.taken && digest.all == last.all {
		return nil
	}
	// Link health changes with every window. A report that changes only
	// it, and not its verdict, waits for the next lastSeen refresh: a busy
	// link costs no more writes than an idle one.
	if last.taken && st.Link != nil && digest.withoutLink == last.withoutLink && ss.holdLink(st.Link, s.opts.LinkThresholds) {
		ss.lastStatus = digest
		return nil
	}
	host := &infrav1.EdgeHost{}
	key := client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}
	err = s.client.Get(ctx, key, host)
	if apierrors.IsNotFound(err) {
		// The first report of a host enrolled a moment ago can beat the
		// informer to it; ask the API server rather than drop the report.
		err = s.apiReader.Get(ctx, key, host)
	}
	if err != nil {
		return err
	}
	if err := trust(host, peer{id: ss.id, key: ss.keyID()}); err != nil {
		// A host being deleted is written no more, whatever it reports.
		return err
	}
	// The providerID is the hub's to define: Cluster API matches Nodes by
	// it, and a host claiming another's would tie a Machine to a Node that
	// is not its own.
	if st.ProviderID != "" && st.ProviderID != ProviderID(host) {
		rejectedFrames.WithLabelValues("ForeignProviderID").Inc()
		s.log.Info("Ignoring a providerID that is not the host's", "EdgeHost", ss.id.String(), "reported", st.ProviderID)
		fixed := *st
		fixed.ProviderID = ""
		st = &fixed
	}
	want := host.DeepCopy()
	want.Status.Facts = st.Facts
	want.Status.Addresses = st.Addresses
	want.Status.AgentObservedGeneration = st.ObservedGeneration
	want.Status.Provisioning = st.Provisioning
	want.Status.ProviderID = st.ProviderID
	want.Status.NodeName = st.NodeName
	want.Status.CertificatesExpiryDate = st.CertificatesExpiryDate
	if st.Link != nil {
		want.Status.Link = st.Link
	}
	if !equality.Semantic.DeepEqual(host.Status, want.Status) {
		// The uid precondition makes sure the write lands on this host, not
		// on one re-created under the same name meanwhile.
		p, err := patchWithUID(host, want)
		if err != nil {
			return err
		}
		if err := s.writeStatus(ctx, func() error { return s.client.Status().Patch(ctx, want, p) }); err != nil {
			return fmt.Errorf("patching status of EdgeHost %s: %w", ss.id, err)
		}
		statusWrites.WithLabelValues("report").Inc()
	}
	ss.lastStatus = digest
	if st.Link != nil {
		ss.wroteLink(st.Link)
	}
	return nil
}

// statusDigest stands for a status report in the comparisons
// recordStatus makes with the next one. Two reports with equal digests
// are equal; unequal digests of equal reports (the same value in another
// spelling) only cost a comparison with the cached host, never a wrong
// write.
type statusDigest struct {
	taken       bool
	all         [sha256.Size]byte
	withoutLink [sha256.Size]byte
}

func digestStatus(st *wire.Status) (statusDigest, error) {
	all, err := json.Marshal(st)
	if err != nil {
		return statusDigest{}, fmt.Errorf("encoding a status report: %w", err)
	}
	noLink := *st
	noLink.Link = nil
	rest, err := json.Marshal(&noLink)
	if err != nil {
		return statusDigest{}, fmt.Errorf("encoding a status report: %w", err)
	}
	return statusDigest{taken: true, all: sha256.Sum256(all), withoutLink: sha256.Sum256(rest)}, nil
}

// setConnectivity records AgentConnected and lastSeenTime. Conditions are a
// list, so the patch carries the resourceVersion it was computed from and
// is retried on conflict rather than overwrite a concurrent change.
func (s *Server) setConnectivity(ctx context.Context, ss *session, connected bool, cause string) {
	if connected && s.waves != nil && s.opts.WaveStatusDelay > 0 && s.waves.on() {
		// News that a host is well can wait for a wave of connections to
		// pass (see Options.WaveStatusDelay); news of a host lost cannot.
		// A host that needs no write (agents back after a hub restart)
		// is not kept waiting for nothing.
		if cause == "connected" && s.alreadyConnected(ctx, ss) {
			skippedStatusWrites.WithLabelValues(cause).Inc()
			return
		}
		// Counted as it starts to wait, so a wave in progress shows.
		waveDelayedStatusWrites.WithLabelValues(cause).Inc()
		s.waves.outlast(ctx, s.opts.WaveStatusDelay)
	}
	mu, _ := s.connMu.LoadOrStore(ss.id.String(), &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	switch cause {
	case "disconnected":
		// A newer session of the same host has taken over: it owns the
		// condition now.
		if cur := s.sessionFor(ss.id.Namespace, ss.id.Name); cur != nil && cur != ss {
			return
		}
	case "connected", "last_seen":
		select {
		case <-ss.done:
			return // closed meanwhile; the disconnect write follows
		default:
		}
	}
	if cause == "connected" && s.alreadyConnected(ctx, ss) {
		skippedStatusWrites.WithLabelValues(cause).Inc()
		return
	}
	// The first attempt reads the informer cache (the optimistic lock
	// turns a stale read into a conflict); a retry asks the API server: one
	// request per refresh instead of two.
	var reader client.Reader = s.client
	// A conflict is retried with a fresh read, and so is an overloaded API
	// server's answer (timeouts, 429, 5xx: thousands of sessions ending
	// together), for half a minute or so: a lost "disconnected" would leave
	// the host reading connected until the reconciler's ContactLost.
	err := retry.OnError(connectivityBackoff, retriable, func() error {
		return s.writeStatus(ctx, func() error {
			err := s.writeConnectivity(ctx, ss, connected, cause, reader)
			reader = s.apiReader
			return err
		})
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error(err, "Recording agent connectivity", "EdgeHost", ss.id.String(), "connected", connected)
	}
}

// writeConnectivity is one attempt at recording the session's host as
// connected or not, from the host as reader has it.
func (s *Server) writeConnectivity(ctx context.Context, ss *session, connected bool, cause string, reader client.Reader) error {
	if !connected && s.sessionFor(ss.id.Namespace, ss.id.Name) != nil {
		return nil // the agent is back meanwhile
	}
	key := client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}
	host := &infrav1.EdgeHost{}
	err := reader.Get(ctx, key, host)
	if reader == s.client && (apierrors.IsNotFound(err) || err == nil && string(host.UID) != ss.id.UID) {
		// The cache may not have seen a host enrolled a moment ago.
		err = s.apiReader.Get(ctx, key, host)
	}
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if string(host.UID) != ss.id.UID {
		return nil
	}
	if !connected && host.Status.HubReplica != "" && host.Status.HubReplica != s.opts.ReplicaName {
		// The agent holds a session on another replica now, which
		// recorded itself: the condition is not ours to clear.
		return nil
	}
	want := host.DeepCopy()
	cond := metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue,
		Reason: ConnectedReason, Message: "Connected to hub replica " + s.opts.ReplicaName,
		ObservedGeneration: host.Generation}
	want.Status.HubReplica = s.opts.ReplicaName
	if !connected {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, DisconnectedReason, "Session ended"
		want.Status.HubReplica = ""
	}
	meta.SetStatusCondition(&want.Status.Conditions, cond)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	want.Status.LastSeenTime = &now
	link := ss.takePendingLink()
	if link != nil && connected {
		want.Status.Link = link
	}
	setLinkVerdict(want, connected, s.opts.LinkThresholds)
	if err := s.client.Status().Patch(ctx, want, client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	statusWrites.WithLabelValues(cause).Inc()
	if connected {
		s.wroteDisconnect.Delete(ss.id.String())
	} else {
		s.wroteDisconnect.Store(ss.id.String(), true)
	}
	if link != nil && connected {
		ss.wroteLink(link)
	}
	return nil
}

// setLinkVerdict sets LinkDegraded as the EdgeHost reconciler would on
// seeing the connectivity change, so that it finds nothing left to patch:
// a connect or a disconnect is one API write, not two. A verdict that turns to or from degraded is left to
// the reconciler, which records an event for it.
func setLinkVerdict(host *infrav1.EdgeHost, connected bool, t linkhealth.Thresholds) {
	was := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition)
	cond := linkhealth.HostCondition(host.Status.Link, connected, t, was)
	if cond.Status == metav1.ConditionTrue || was != nil && was.Status == metav1.ConditionTrue {
		return
	}
	cond.ObservedGeneration = host.Generation
	meta.SetStatusCondition(&host.Status.Conditions, cond)
}

// writeStatus runs write once a status-write place is free (see
// Options.MaxConcurrentStatusWrites).
func (s *Server) writeStatus(ctx context.Context, write func() error) error {
	select {
	case s.statusWrites <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.statusWrites }()
	return write()
}

// connectivityBackoff spreads retries of a connectivity write over half a
// minute.
var connectivityBackoff = wait.Backoff{Steps: 8, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.5, Cap: 20 * time.Second}

func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsUnexpectedServerError(err) || errors.Is(err, context.DeadlineExceeded) || isNetError(err)
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// alreadyConnected tells, from the cache, that the host already reads as
// connected to this replica with a lastSeenTime younger than two refresh
// intervals (one, plus a restart's worth of slack), so a reconnect need
// not write it again: after a hub restart, thousands of agents come back to
// hosts that still say so. Not when this process itself wrote "disconnected"
// for the host (the cache may not show that write yet).
func (s *Server) alreadyConnected(ctx context.Context, ss *session) bool {
	if _, wrote := s.wroteDisconnect.Load(ss.id.String()); wrote {
		return false
	}
	host := &infrav1.EdgeHost{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil || string(host.UID) != ss.id.UID {
		return false
	}
	c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentConnectedCondition)
	return c != nil && c.Status == metav1.ConditionTrue && host.Status.HubReplica == s.opts.ReplicaName &&
		host.Status.LastSeenTime != nil && time.Since(host.Status.LastSeenTime.Time) < 2*s.opts.LastSeenInterval
}

func (s *Server) markConnected(ctx context.Context, ss *session) {
	s.setConnectivity(ctx, ss, true, "connected")
}

func (s *Server) markDisconnected(ctx context.Context, ss *session) {
	if ss.replaced.Load() {
		return // the agent is already back on a newer session
	}
	s.setConnectivity(ctx, ss, false, "disconnected")
}

// touchLastSeen refreshes lastSeenTime, coarsely: once per
// LastSeenInterval per connected agent, never per heartbeat.
func (s *Server) touchLastSeen(ctx context.Context, ss *session) {
	s.setConnectivity(ctx, ss, true, "last_seen")
}

// patchWithUID is a merge patch from host to want that also carries the
// host's uid: the API server refuses it (a Conflict) if the object under
// that name is no longer the same host.
func patchWithUID(host, want *infrav1.EdgeHost) (client.Patch, error) {
	data, err := client.MergeFrom(host).Data(want)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["uid"] = string(host.UID)
	m["metadata"] = md
	data, err = json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}
