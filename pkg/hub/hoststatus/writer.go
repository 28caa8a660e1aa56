package hoststatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Reasons of the AgentConnected condition.
const (
	ConnectedReason    = "Connected"
	DisconnectedReason = "Disconnected"
)

// Options configure a Writer.
type Options struct {
	// ReplicaName names this replica in conditions.
	ReplicaName string
	// ReplicaProxy is where other replicas reach this one's edge-reach
	// proxy (host:port), recorded with ReplicaName; "" for none.
	ReplicaProxy string
	// LastSeenInterval is how often lastSeenTime is refreshed for a
	// connected agent.
	LastSeenInterval time.Duration
	// DisconnectGrace is how long a host whose session ended still reads
	// as connected (negative: recorded at once).
	DisconnectGrace time.Duration
	// WaveStatusDelay is how long news that a host is well waits for a
	// wave of connections to pass (not positive: not at all).
	WaveStatusDelay time.Duration
	// LinkThresholds decide the LinkDegraded verdict.
	LinkThresholds linkhealth.Thresholds
}

// Writer records hosts' reports and connectivity in EdgeHost status.
type Writer struct {
	opts Options
	// client reads the informer cache and writes; apiReader reads past it.
	client    client.Client
	apiReader client.Reader
	log       logr.Logger
	recorder  events.EventRecorder
	registry  Registry
	// places bound the status writes in flight.
	places *admission.Places
	waves  *admission.Waves

	// hostMu serialises the status writes of one host ("namespace/name" →
	// *sync.Mutex): a reconnect's "connected" and the old session's
	// "disconnected" land in the order they happened, and so do a
	// session's last report and its successor's first.
	hostMu sync.Map
	// wroteDisconnect holds the hosts this process last recorded as
	// disconnected ("namespace/name" → true).
	wroteDisconnect sync.Map
	// pending holds a timer per host whose session ended less than
	// DisconnectGrace ago ("namespace/name").
	mu      sync.Mutex
	pending map[string]*time.Timer
}

// New returns a Writer. places bound its writes in flight; waves may be nil
// (no wave ever holds a write back).
func New(c client.Client, apiReader client.Reader, recorder events.EventRecorder, log logr.Logger,
	registry Registry, places *admission.Places, waves *admission.Waves, opts Options) *Writer {
	return &Writer{opts: opts, client: c, apiReader: apiReader, recorder: recorder, log: log, registry: registry,
		places: places, waves: waves, pending: map[string]*time.Timer{}}
}

// RecordStatus writes the agent's report into EdgeHost status, and only
// when it differs from the last one: an agent re-sending the same status
// (after every reconnect, on its resync timer) costs no API write.
func (w *Writer) RecordStatus(ctx context.Context, ss Session, st *wire.Status) error {
	digest, err := digestStatus(st)
	if err != nil {
		return err
	}
	reports := ss.Reports()
	last := reports.last
	if last.taken && digest.all == last.all {
		return nil
	}
	// Link health changes with every window. A report that changes only
	// it, and not its verdict, waits for the next lastSeen refresh: a busy
	// link costs no more writes than an idle one.
	if last.taken && st.Link != nil && digest.withoutLink == last.withoutLink && reports.holdLink(st.Link, w.opts.LinkThresholds) {
		reports.last = digest
		return nil
	}
	peer := ss.Peer()
	mu := w.hostLock(peer.ID.String())
	mu.Lock()
	defer mu.Unlock()
	if w.superseded(ss) {
		// What the newer session's agent reports is the truth now.
		skippedStatusWrites.WithLabelValues("superseded").Inc()
		return nil
	}
	host := &infrav1.EdgeHost{}
	key := client.ObjectKey{Namespace: peer.ID.Namespace, Name: peer.ID.Name}
	err = w.client.Get(ctx, key, host)
	if apierrors.IsNotFound(err) {
		// The first report of a host enrolled a moment ago can beat the
		// informer to it; ask the API server rather than drop the report.
		err = w.apiReader.Get(ctx, key, host)
	}
	if err != nil {
		return err
	}
	if err := identity.Trust(host, peer); err != nil {
		// A host being deleted is written no more, whatever it reports.
		return err
	}
	if err := w.writeReport(ctx, ss, host, st); err != nil {
		return err
	}
	reports.last = digest
	if st.Link != nil {
		reports.wroteLink(st.Link)
	}
	return nil
}

// reported is host with what st reports.
func (w *Writer) reported(host *infrav1.EdgeHost, st *wire.Status) *infrav1.EdgeHost {
	want := host.DeepCopy()
	want.Status.Facts = st.Facts
	want.Status.Addresses = st.Addresses
	want.Status.AgentObservedGeneration = st.ObservedGeneration
	want.Status.Provisioning = st.Provisioning
	want.Status.ProviderID = st.ProviderID
	want.Status.NodeName = st.NodeName
	want.Status.CertificatesExpiryDate = st.CertificatesExpiryDate
	want.Status.KubernetesVersion = st.KubernetesVersion
	want.Status.Upgrade = st.Upgrade
	want.Status.CertificatesRenewal = st.CertificatesRenewal
	want.Status.Staging = st.Staging
	want.Status.AgentRelease = st.AgentRelease
	if st.Link != nil {
		want.Status.Link = st.Link
		w.setLinkDegraded(want, connectedNow(host))
	}
	setStateUnwritable(want, st.StateUnwritable)
	setClockSkewed(want, st.ClockSkew)
	return want
}

// setClockSkewed sets ClockSkewed from the agent's report: True with how
// far off, False once the host's clock agrees again, absent on hosts
// whose clock never disagreed.
func setClockSkewed(host *infrav1.EdgeHost, skew *metav1.Duration) {
	off, message := skew != nil && skew.Duration.Abs() >= wire.MinClockSkew, ""
	if off {
		way := "ahead of"
		if skew.Duration < 0 {
			way = "behind"
		}
		message = fmt.Sprintf("The host's clock is %s %s the hub's: fleet times the host's certificates by the hub's clock, "+
			"but the host's logs, and Kubernetes' certificate checks on the host, are off; set its time (NTP)", skew.Duration.Abs(), way)
	}
	setReported(host, infrav1.ClockSkewedCondition, off, infrav1.ClockSkewedReason, message,
		infrav1.ClockSynchronizedReason, "The host's clock agrees with the hub's")
}

// setStateUnwritable sets StateUnwritable from the agent's report: True
// with why, False once the agent wrote its state again, absent on hosts
// that never failed to.
func setStateUnwritable(host *infrav1.EdgeHost, why string) {
	setReported(host, infrav1.StateUnwritableCondition, why != "", infrav1.StateUnwritableReason,
		"The agent cannot write its state directory: what it did holds and is reported, but a restart would not find it: "+why,
		infrav1.StateRecordedReason, "The agent records its state again")
}

// setReported sets condition from what an agent reported: True with bad
// and message while it holds, False with good and recovered once it no
// longer does; hosts it never held for do not carry it.
func setReported(host *infrav1.EdgeHost, condition string, holds bool, bad, message, good, recovered string) {
	cond := metav1.Condition{Type: condition, ObservedGeneration: host.Generation}
	switch {
	case holds:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, bad, message
	case meta.FindStatusCondition(host.Status.Conditions, condition) != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, good, recovered
	default:
		return
	}
	meta.SetStatusCondition(&host.Status.Conditions, cond)
}

// writeReport writes what st changes in host's status. A change to the
// conditions (LinkDegraded) or to agentRelease carries the resourceVersion
// it was computed from and is retried on a fresh read: conditions are one
// list, and a merge patch from a stale copy would drop the AgentConnected a
// connectivity write put there meanwhile.
func (w *Writer) writeReport(ctx context.Context, ss Session, host *infrav1.EdgeHost, st *wire.Status) error {
	peer := ss.Peer()
	for attempt := 1; ; attempt++ {
		want := w.reported(host, st)
		if equality.Semantic.DeepEqual(host.Status, want.Status) {
			return nil
		}
		// The uid precondition makes sure the write lands on this host, not
		// on one re-created under the same name meanwhile.
		// So does a change to agentRelease: it changes in quick steps
		// (a trial's start, then its commit), and a merge patch from a
		// copy that missed one would leave the server's object half old.
		lock := !equality.Semantic.DeepEqual(host.Status.Conditions, want.Status.Conditions) ||
			!equality.Semantic.DeepEqual(host.Status.AgentRelease, want.Status.AgentRelease)
		p, err := patchWithUID(host, want, lock)
		if err != nil {
			return err
		}
		err = w.write(ctx, func() error { return w.client.Status().Patch(ctx, want, p) })
		if err == nil {
			statusWrites.WithLabelValues("report").Inc()
			w.linkEvent(host, want)
			w.stateEvent(host, want)
			w.clockEvent(host, want)
			w.renewalEvent(host, want)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt == reportAttempts {
			return fmt.Errorf("patching status of EdgeHost %s: %w", peer.ID, err)
		}
		if w.superseded(ss) || ended(ss) {
			// The write in between may be a newer session's (here or on
			// another replica): an ended session's report must not undo
			// it, and its agent reports again when it connects.
			skippedStatusWrites.WithLabelValues("superseded").Inc()
			return nil
		}
		fresh := &infrav1.EdgeHost{}
		if err := w.apiReader.Get(ctx, client.ObjectKeyFromObject(host), fresh); err != nil {
			return err
		}
		if err := identity.Trust(fresh, peer); err != nil {
			return err
		}
		host = fresh
	}
}

// hostLock is the mutex of one host's status writes.
func (w *Writer) hostLock(key string) *sync.Mutex {
	mu, _ := w.hostMu.LoadOrStore(key, &sync.Mutex{})
	return mu.(*sync.Mutex)
}

// superseded tells that a newer session of ss's host is held here.
func (w *Writer) superseded(ss Session) bool {
	if ss.Replaced() {
		return true
	}
	id := ss.Peer().ID
	cur := w.registry.Current(id.Namespace, id.Name)
	return cur != nil && cur != ss
}

func ended(ss Session) bool {
	select {
	case <-ss.Done():
		return true
	default:
		return false
	}
}

// reportAttempts bounds the tries of a report that changes conditions.
const reportAttempts = 5

// connectedNow tells whether host reads as connected.
func connectedNow(host *infrav1.EdgeHost) bool {
	c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentConnectedCondition)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Connected records a new session's host as connected.
func (w *Writer) Connected(ctx context.Context, ss Session) {
	w.setConnectivity(ctx, ss, true, "connected")
}

// Disconnected records the session's host as disconnected, unless the
// agent is already back on a newer session.
func (w *Writer) Disconnected(ctx context.Context, ss Session) {
	if ss.Replaced() {
		return
	}
	w.setConnectivity(ctx, ss, false, "disconnected")
}

// TouchLastSeen refreshes lastSeenTime, coarsely: once per
// LastSeenInterval per connected agent, never per heartbeat.
func (w *Writer) TouchLastSeen(ctx context.Context, ss Session) {
	w.setConnectivity(ctx, ss, true, "last_seen")
}

// setConnectivity records AgentConnected and lastSeenTime. Conditions are a
// list, so the patch carries the resourceVersion it was computed from and
// is retried on conflict rather than overwrite a concurrent change.
func (w *Writer) setConnectivity(ctx context.Context, ss Session, connected bool, cause string) {
	if connected && w.waves != nil && w.opts.WaveStatusDelay > 0 && w.waves.On() {
		// News that a host is well can wait for a wave of connections to
		// pass; news of a host lost cannot. A host that needs no write
		// (agents back after a hub restart) is not kept waiting for nothing.
		if cause == "connected" && w.skipConnected(ctx, ss) {
			return
		}
		// Counted as it starts to wait, so a wave in progress shows.
		waveDelayedStatusWrites.WithLabelValues(cause).Inc()
		w.waves.Outlast(ctx, w.opts.WaveStatusDelay)
	}
	id := ss.Peer().ID
	mu := w.hostLock(id.String())
	mu.Lock()
	defer mu.Unlock()
	switch cause {
	case "disconnected":
		// A newer session of the same host has taken over: it owns the
		// condition now.
		if cur := w.registry.Current(id.Namespace, id.Name); cur != nil && cur != ss {
			return
		}
	case "connected", "last_seen":
		select {
		case <-ss.Done():
			return // closed meanwhile; the disconnect write follows
		default:
		}
	}
	if cause == "connected" && w.skipConnected(ctx, ss) {
		return
	}
	// The first attempt reads the informer cache (the optimistic lock
	// turns a stale read into a conflict); a retry asks the API server: one
	// request per refresh instead of two.
	var reader client.Reader = w.client
	// A conflict is retried with a fresh read, and so is an overloaded API
	// server's answer (thousands of sessions ending together): a lost
	// "disconnected" would leave the host reading connected until the
	// reconciler's ContactLost.
	err := retry.OnError(connectivityBackoff, retriable, func() error {
		return w.write(ctx, func() error {
			err := w.writeConnectivity(ctx, ss, connected, cause, reader)
			reader = w.apiReader
			return err
		})
	})
	if err != nil && ctx.Err() == nil {
		w.log.Error(err, "Recording agent connectivity", "EdgeHost", id.String(), "connected", connected)
	}
}

// writeConnectivity is one attempt at recording the session's host as
// connected or not, from the host as reader has it.
func (w *Writer) writeConnectivity(ctx context.Context, ss Session, connected bool, cause string, reader client.Reader) error {
	id := ss.Peer().ID
	if !connected && w.registry.Current(id.Namespace, id.Name) != nil {
		return nil // the agent is back meanwhile
	}
	key := client.ObjectKey{Namespace: id.Namespace, Name: id.Name}
	host := &infrav1.EdgeHost{}
	err := reader.Get(ctx, key, host)
	if reader == w.client && (apierrors.IsNotFound(err) || err == nil && string(host.UID) != id.UID) {
		// The cache may not have seen a host enrolled a moment ago.
		err = w.apiReader.Get(ctx, key, host)
	}
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if string(host.UID) != id.UID {
		return nil
	}
	if !connected && host.Status.HubReplica != "" && host.Status.HubReplica != w.opts.ReplicaName {
		// The agent holds a session on another replica now, which
		// recorded itself: the condition is not ours to clear.
		return nil
	}
	want := host.DeepCopy()
	cond := metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue,
		Reason: ConnectedReason, Message: "Connected to hub replica " + w.opts.ReplicaName,
		ObservedGeneration: host.Generation}
	want.Status.HubReplica, want.Status.HubReplicaProxy = w.opts.ReplicaName, w.opts.ReplicaProxy
	if !connected {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, DisconnectedReason, "Session ended"
		want.Status.HubReplica, want.Status.HubReplicaProxy = "", ""
	}
	meta.SetStatusCondition(&want.Status.Conditions, cond)
	if connected {
		supported(want)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	want.Status.LastSeenTime = &now
	reports := ss.Reports()
	link := reports.takePendingLink()
	if link != nil && connected {
		want.Status.Link = link
	}
	w.setLinkDegraded(want, connected)
	if err := w.client.Status().Patch(ctx, want, client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	statusWrites.WithLabelValues(cause).Inc()
	w.linkEvent(host, want)
	if connected {
		w.wroteDisconnect.Delete(id.String())
	} else {
		w.wroteDisconnect.Store(id.String(), true)
	}
	if link != nil && connected {
		reports.wroteLink(link)
	}
	return nil
}

// setLinkDegraded sets LinkDegraded from the host's link health and its
// agent's connectivity: this writer is the condition's one owner, so a
// connect, a disconnect or a report that changes the verdict is one write.
func (w *Writer) setLinkDegraded(host *infrav1.EdgeHost, connected bool) {
	was := meta.FindStatusCondition(host.Status.Conditions, infrav1.LinkDegradedCondition)
	cond := linkhealth.HostCondition(host.Status.Link, connected, w.opts.LinkThresholds, was)
	cond.ObservedGeneration = host.Generation
	meta.SetStatusCondition(&host.Status.Conditions, cond)
}

// linkEvent tells users when a write turned the link verdict to or from
// degraded.
func (w *Writer) linkEvent(before, after *infrav1.EdgeHost) {
	w.turnEvent(before, after, infrav1.LinkDegradedCondition, infrav1.LinkDegradedReason, "LinkRecovered", "LinkHealth")
}

// stateEvent tells users when a report turned StateUnwritable to or from
// True.
func (w *Writer) stateEvent(before, after *infrav1.EdgeHost) {
	w.turnEvent(before, after, infrav1.StateUnwritableCondition, infrav1.StateUnwritableReason, infrav1.StateRecordedReason, "AgentState")
}

// clockEvent tells users when a report turned ClockSkewed to or from
// True.
func (w *Writer) clockEvent(before, after *infrav1.EdgeHost) {
	w.turnEvent(before, after, infrav1.ClockSkewedCondition, infrav1.ClockSkewedReason, infrav1.ClockSynchronizedReason, "AgentClock")
}

// renewalEvent tells users how an in-place certificate renewal ended,
// once: when a write first records its end.
func (w *Writer) renewalEvent(before, after *infrav1.EdgeHost) {
	now, was := after.Status.CertificatesRenewal, before.Status.CertificatesRenewal
	if now == nil || now.State == infrav1.RenewalRunning ||
		was != nil && was.State == now.State && was.StartTime.Equal(&now.StartTime) {
		return
	}
	if now.State == infrav1.RenewalSucceeded {
		w.recorder.Eventf(after, nil, corev1.EventTypeNormal, "CertificatesRenewed", "RenewCertificates",
			"Renewed the control plane's certificates in place (started %s)", now.StartTime.UTC().Format(time.RFC3339))
		return
	}
	w.recorder.Eventf(after, nil, corev1.EventTypeWarning, "CertificatesRenewalFailed", "RenewCertificates",
		"Renewing the control plane's certificates failed at step %q (%s): %s", now.Step, now.State, now.Message)
}

// turnEvent records a Warning (reason bad) when a write turned condition
// True, a Normal one (reason good) when it turned it back to False.
func (w *Writer) turnEvent(before, after *infrav1.EdgeHost, condition, bad, good, action string) {
	if w.recorder == nil {
		return
	}
	was := meta.IsStatusConditionTrue(before.Status.Conditions, condition)
	now := meta.FindStatusCondition(after.Status.Conditions, condition)
	switch {
	case now == nil:
	case now.Status == metav1.ConditionTrue && !was:
		w.recorder.Eventf(after, nil, corev1.EventTypeWarning, bad, action, "%s", now.Message)
	case now.Status == metav1.ConditionFalse && was:
		w.recorder.Eventf(after, nil, corev1.EventTypeNormal, good, action, "%s", now.Message)
	}
}

// Unsupported records that the hub refused a session of id's host because
// its agent shares no protocol version with the hub: AgentVersionUnsupported
// True with reason and message, and a Warning event when it turns True. An
// agent retrying with backoff costs no write while nothing changes.
func (w *Writer) Unsupported(ctx context.Context, id pki.Identity, reason, message string) {
	err := retry.OnError(connectivityBackoff, retriable, func() error {
		return w.write(ctx, func() error {
			host := &infrav1.EdgeHost{}
			if err := w.client.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, host); err != nil {
				return client.IgnoreNotFound(err)
			}
			if string(host.UID) != id.UID {
				return nil
			}
			was := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentVersionUnsupportedCondition)
			if was != nil && was.Status == metav1.ConditionTrue && was.Reason == reason && was.Message == message {
				skippedStatusWrites.WithLabelValues("unsupported").Inc()
				return nil
			}
			want := host.DeepCopy()
			meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{Type: infrav1.AgentVersionUnsupportedCondition,
				Status: metav1.ConditionTrue, Reason: reason, Message: message, ObservedGeneration: host.Generation})
			if err := w.client.Status().Patch(ctx, want, client.MergeFromWithOptions(host, client.MergeFromWithOptimisticLock{})); err != nil {
				return err
			}
			statusWrites.WithLabelValues("unsupported").Inc()
			if w.recorder != nil && (was == nil || was.Status != metav1.ConditionTrue) {
				w.recorder.Eventf(want, nil, corev1.EventTypeWarning, reason, "Connect", "%s", message)
			}
			return nil
		})
	})
	if err != nil && ctx.Err() == nil {
		w.log.Error(err, "Recording an unsupported agent", "EdgeHost", id.String())
	}
}

// supported turns a host's AgentVersionUnsupported False once its agent
// is served; hosts never refused get no condition.
func supported(host *infrav1.EdgeHost) {
	if c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentVersionUnsupportedCondition); c != nil && c.Status != metav1.ConditionFalse {
		meta.SetStatusCondition(&host.Status.Conditions, metav1.Condition{Type: infrav1.AgentVersionUnsupportedCondition,
			Status: metav1.ConditionFalse, Reason: infrav1.AgentVersionSupportedReason,
			Message: "The host's agent speaks a protocol version this hub speaks", ObservedGeneration: host.Generation})
	}
}

// write runs fn once a status-write place is free.
func (w *Writer) write(ctx context.Context, fn func() error) error {
	if err := w.places.Await(ctx); err != nil {
		return err
	}
	defer w.places.Release()
	return fn()
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

// skipConnected tells that a new session's host needs no write, as it
// already reads connected to this replica (alreadyConnected). The session
// then refreshes lastSeenTime when the recorded one turns a refresh
// interval old, not a full interval from now: else agents that reconnect
// again and again would each put the refresh off, until the reconciler
// marked a connected host ContactLost.
func (w *Writer) skipConnected(ctx context.Context, ss Session) bool {
	seen, ok := w.alreadyConnected(ctx, ss)
	if ok {
		skippedStatusWrites.WithLabelValues("connected").Inc()
		ss.RefreshLastSeenBy(seen.Add(w.opts.LastSeenInterval))
	}
	return ok
}

// alreadyConnected tells, from the cache, that the host already reads as
// connected to this replica with a lastSeenTime younger than two refresh
// intervals (one, plus a restart's worth of slack), so a reconnect need
// not write it again: after a hub restart, thousands of agents come back to
// hosts that still say so. Not when this process itself wrote "disconnected"
// for the host (the cache may not show that write yet).
func (w *Writer) alreadyConnected(ctx context.Context, ss Session) (lastSeen time.Time, ok bool) {
	id := ss.Peer().ID
	if _, wrote := w.wroteDisconnect.Load(id.String()); wrote {
		return time.Time{}, false
	}
	host := &infrav1.EdgeHost{}
	if err := w.client.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, host); err != nil || string(host.UID) != id.UID {
		return time.Time{}, false
	}
	if meta.IsStatusConditionTrue(host.Status.Conditions, infrav1.AgentVersionUnsupportedCondition) {
		return time.Time{}, false
	}
	c := meta.FindStatusCondition(host.Status.Conditions, infrav1.AgentConnectedCondition)
	if c == nil || c.Status != metav1.ConditionTrue || host.Status.HubReplica != w.opts.ReplicaName ||
		host.Status.HubReplicaProxy != w.opts.ReplicaProxy || host.Status.LastSeenTime == nil ||
		time.Since(host.Status.LastSeenTime.Time) >= 2*w.opts.LastSeenInterval {
		return time.Time{}, false
	}
	return host.Status.LastSeenTime.Time, true
}

// patchWithUID is a merge patch from host to want that also carries the
// host's uid, and with lock its resourceVersion: the API server refuses it
// (a Conflict) if the object under that name is no longer the same host,
// or no longer the version want was computed from.
func patchWithUID(host, want *infrav1.EdgeHost, lock bool) (client.Patch, error) {
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
	if lock {
		md["resourceVersion"] = host.ResourceVersion
	}
	m["metadata"] = md
	data, err = json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.MergePatchType, data), nil
}
