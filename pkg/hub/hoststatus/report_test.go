package hoststatus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/pki"
)

// A report read from a cache that has not yet seen the connectivity write
// of its session (an agent's first report follows its connection at once)
// must not take AgentConnected away: a report that changes the conditions
// (LinkDegraded) is written only onto the version it was computed from.
func TestReportKeepsAConditionWrittenMeanwhile(t *testing.T) {
	ctx := context.Background()
	c, host := oneHost()
	stale := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(host), stale); err != nil {
		t.Fatal(err)
	}
	s := New(staleCache{Client: c, stale: stale}, c, nil, logr.Discard(), noSessions{}, admission.NewPlaces(1), nil,
		Options{ReplicaName: "hub-0", LastSeenInterval: 5 * time.Minute, LinkThresholds: linkhealth.DefaultThresholds()})
	ss := &testSession{peer: identity.Peer{ID: pki.Identity{Namespace: "site-a", Name: "store-1", UID: "uid-1"}}, done: make(chan struct{})}

	// The session's connectivity write lands; the cache still has the
	// host as it was.
	fresh := stale.DeepCopy()
	meta.SetStatusCondition(&fresh.Status.Conditions, metav1.Condition{Type: infrav1.AgentConnectedCondition,
		Status: metav1.ConditionTrue, Reason: ConnectedReason, LastTransitionTime: metav1.Now()})
	if err := c.Status().Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	rtt := int64(20)
	report := &wire.Status{ObservedGeneration: 1, Link: &infrav1.LinkHealth{WindowSeconds: 60, HubRTTMilliseconds: &rtt, ObservedTime: metav1.Now()}}
	if err := s.RecordStatus(ctx, ss, report); err != nil {
		t.Fatal(err)
	}
	got := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(host), got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, infrav1.AgentConnectedCondition); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("AgentConnected after the report: %+v", cond)
	}
	if meta.FindStatusCondition(got.Status.Conditions, infrav1.LinkDegradedCondition) == nil || got.Status.Link == nil {
		t.Errorf("the report's link health was not written: %+v", got.Status)
	}
}

// An agent that restarts into a new release reports from a new session at
// once; its old session's last report, still being written (retried on a
// conflict, from a cache that missed the new one), must not land over the
// new session's: the agent re-sends only what changed, so the host would
// read as on the old release for good (a 1,000-agent roll-out stalled at
// 995 on it).
func TestAReplacedSessionsReportDoesNotUndoTheNewOnes(t *testing.T) {
	ctx := context.Background()
	c, host := oneHost()
	stale := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(host), stale); err != nil {
		t.Fatal(err)
	}
	peer := identity.Peer{ID: pki.Identity{Namespace: "site-a", Name: "store-1", UID: "uid-1"}}
	old := &testSession{peer: peer, done: make(chan struct{})}
	cur := &testSession{peer: peer, done: make(chan struct{})}
	s := New(staleCache{Client: c, stale: stale}, c, nil, logr.Discard(), sessionsOf{cur}, admission.NewPlaces(1), nil,
		Options{ReplicaName: "hub-0", LastSeenInterval: 5 * time.Minute, LinkThresholds: linkhealth.DefaultThresholds()})

	onNew := &wire.Status{ObservedGeneration: 1, Facts: infrav1.HostFacts{AgentVersion: "v0.9.2"},
		AgentRelease: &infrav1.AgentReleaseStatus{Committed: "v0.9.2"}}
	if err := s.RecordStatus(ctx, cur, onNew); err != nil {
		t.Fatal(err)
	}
	// The old session ended as its agent restarted, and a newer one holds
	// the host: whether or not this replica marked it replaced yet.
	close(old.done)
	for _, replaced := range []bool{false, true} {
		old.replaced = replaced
		fetching := &wire.Status{ObservedGeneration: 1, Facts: infrav1.HostFacts{AgentVersion: "v0.9.1"},
			AgentRelease: &infrav1.AgentReleaseStatus{Transfer: &infrav1.AgentTransferStatus{Version: "v0.9.2", State: infrav1.AgentTransferFetching, Bytes: 10, TotalBytes: 10}}}
		if err := s.RecordStatus(ctx, old, fetching); err != nil {
			t.Fatal(err)
		}
		got := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(host), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Facts.AgentVersion != "v0.9.2" || got.Status.AgentRelease == nil || got.Status.AgentRelease.Transfer != nil {
			t.Fatalf("replaced %v: the old session's report landed: agent %s, agentRelease %+v", replaced, got.Status.Facts.AgentVersion, got.Status.AgentRelease)
		}
	}
}

// sessionsOf is a replica holding the given sessions.
type sessionsOf []Session

func (s sessionsOf) Current(namespace, name string) Session {
	for _, ss := range s {
		if id := ss.Peer().ID; id.Namespace == namespace && id.Name == name {
			return ss
		}
	}
	return nil
}

// staleCache answers reads with a copy of the host from before a write.
type staleCache struct {
	client.Client
	stale *infrav1.EdgeHost
}

func (s staleCache) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s.stale.DeepCopyInto(obj.(*infrav1.EdgeHost))
	return nil
}

// An agent that cannot write its state directory says so, and the host
// reads StateUnwritable True with why and a Warning event; once it writes
// again the condition turns False. A host never affected has none.
func TestStateUnwritableFollowsTheAgentsReport(t *testing.T) {
	const why = "writing /var/lib/fleet-agent/applied.json: no space left on device"
	checkConditionSteps(t, infrav1.StateUnwritableCondition, []conditionStep{
		{wire.Status{}, "", "", "", ""},
		{wire.Status{StateUnwritable: why}, metav1.ConditionTrue, infrav1.StateUnwritableReason, why, "Warning StateUnwritable"},
		{wire.Status{}, metav1.ConditionFalse, infrav1.StateRecordedReason, "again", "Normal StateRecorded"},
	})
}

// An agent whose clock is a minute or more off the hub's says by how
// much, and the host reads ClockSkewed True, saying which way, with a
// Warning event; back within a minute it turns False. A host whose clock
// never disagreed has none.
func TestClockSkewedFollowsTheAgentsReport(t *testing.T) {
	skew := func(d time.Duration) wire.Status { return wire.Status{ClockSkew: &metav1.Duration{Duration: d}} }
	checkConditionSteps(t, infrav1.ClockSkewedCondition, []conditionStep{
		{wire.Status{}, "", "", "", ""},
		{skew(time.Hour), metav1.ConditionTrue, infrav1.ClockSkewedReason, "1h0m0s ahead of the hub's", "Warning ClockSkewed"},
		{skew(-2 * time.Hour), metav1.ConditionTrue, infrav1.ClockSkewedReason, "2h0m0s behind the hub's", ""},
		{wire.Status{}, metav1.ConditionFalse, infrav1.ClockSynchronizedReason, "agrees", "Normal ClockSynchronized"},
	})
}

// conditionStep is an agent's report and what it must leave on its host.
type conditionStep struct {
	report wire.Status
	// status, reason and a part of the message of the condition; no
	// status: the host must not have it.
	status  metav1.ConditionStatus
	reason  string
	message string
	// event is the start of the event the report records; "": none.
	event string
}

// checkConditionSteps records each step's report in turn, and checks the
// condition and the event it leaves.
func checkConditionSteps(t *testing.T, condition string, steps []conditionStep) {
	t.Helper()
	ctx := context.Background()
	c, host := oneHost()
	rec := events.NewFakeRecorder(10)
	s := New(c, c, rec, logr.Discard(), noSessions{}, admission.NewPlaces(1), nil,
		Options{ReplicaName: "hub-0", LastSeenInterval: 5 * time.Minute, LinkThresholds: linkhealth.DefaultThresholds()})
	ss := &testSession{peer: identity.Peer{ID: pki.Identity{Namespace: "site-a", Name: "store-1", UID: "uid-1"}}, done: make(chan struct{})}
	for i, step := range steps {
		st := step.report
		st.ObservedGeneration = int64(i + 1)
		if err := s.RecordStatus(ctx, ss, &st); err != nil {
			t.Fatal(err)
		}
		got := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(host), got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, condition)
		switch {
		case step.status == "" && cond != nil:
			t.Fatalf("step %d: a host never affected has %+v", i, cond)
		case step.status != "" && (cond == nil || cond.Status != step.status || cond.Reason != step.reason || !strings.Contains(cond.Message, step.message)):
			t.Fatalf("step %d: %+v", i, cond)
		}
		select {
		case e := <-rec.Events:
			if step.event == "" || !strings.HasPrefix(e, step.event) {
				t.Fatalf("step %d: event %q, want %q", i, e, step.event)
			}
		default:
			if step.event != "" {
				t.Fatalf("step %d: no event, want %q", i, step.event)
			}
		}
	}
}

// oneHost is a fake API server holding EdgeHost site-a/store-1.
func oneHost() (client.Client, *infrav1.EdgeHost) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "site-a", Name: "store-1", UID: "uid-1"}}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(host).WithStatusSubresource(host).Build(), host
}

// An agent that reconnects to the replica its host already reads as
// connected to costs no write, and its new session refreshes lastSeenTime
// when the recorded one turns an interval old, not an interval from now:
// an agent that reconnects again and again must not put the refresh off
// until its host reads ContactLost.
func TestAReconnectKeepsTheLastSeenRefreshDue(t *testing.T) {
	ctx := context.Background()
	c, host := oneHost()
	seen := metav1.NewTime(time.Now().Add(-3 * time.Minute).Truncate(time.Second))
	host.Status.HubReplica, host.Status.LastSeenTime = "hub-0", &seen
	host.Status.Conditions = []metav1.Condition{{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue,
		Reason: ConnectedReason, LastTransitionTime: seen}}
	if err := c.Status().Update(ctx, host); err != nil {
		t.Fatal(err)
	}
	s := New(c, c, nil, logr.Discard(), noSessions{}, admission.NewPlaces(1), nil,
		Options{ReplicaName: "hub-0", LastSeenInterval: 5 * time.Minute, LinkThresholds: linkhealth.DefaultThresholds()})
	ss := &testSession{peer: identity.Peer{ID: pki.Identity{Namespace: "site-a", Name: "store-1", UID: "uid-1"}}, done: make(chan struct{})}
	s.Connected(ctx, ss)
	got := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(host), got); err != nil {
		t.Fatal(err)
	}
	if !got.Status.LastSeenTime.Equal(&seen) {
		t.Errorf("a reconnect to a host already shown connected wrote lastSeenTime %v (was %v)", got.Status.LastSeenTime, seen)
	}
	if want := seen.Add(5 * time.Minute); !ss.refreshBy.Equal(want) {
		t.Errorf("the new session refreshes lastSeenTime by %v, want %v (the recorded one an interval old)", ss.refreshBy, want)
	}
}
