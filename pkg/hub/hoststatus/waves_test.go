package hoststatus

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/linkhealth"
	"github.com/edgefleet/fleet/pkg/pki"
)

// While a wave of connections queues for TLS handshakes, a write that
// only records a host as well waits for the wave to pass (and is dropped
// if its session ends meanwhile, and not made at all if the host already
// reads connected); a host lost is recorded at once. (The
// fake client: when a write happens relative to a wave cannot be arranged
// against a real hub without holding its handshake places.)
func TestConnectedWritesWaitForWaves(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = infrav1.AddToScheme(scheme)
	hosts := []client.Object{
		&infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "site-a", Name: "store-1", UID: "uid-1"}},
		&infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "site-a", Name: "store-2", UID: "uid-2"}},
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(hosts...).WithStatusSubresource(hosts...).Build()
	waves := admission.NewWaves()
	s := New(c, c, nil, logr.Discard(), noSessions{}, admission.NewPlaces(1), waves,
		Options{ReplicaName: "hub-0", WaveStatusDelay: time.Minute, LastSeenInterval: 5 * time.Minute, LinkThresholds: linkhealth.DefaultThresholds()})
	newSession := func(name, uid string) *testSession {
		return &testSession{peer: identity.Peer{ID: pki.Identity{Namespace: "site-a", Name: name, UID: uid}}, done: make(chan struct{})}
	}
	connected := func(name string) metav1.ConditionStatus {
		t.Helper()
		h := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "site-a", Name: name}, h); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentConnectedCondition); cond != nil {
			return cond.Status
		}
		return metav1.ConditionUnknown
	}
	mark := func(ss *testSession) <-chan struct{} {
		done := make(chan struct{})
		go func() { s.Connected(ctx, ss); close(done) }()
		return done
	}
	settle := func() { time.Sleep(200 * time.Millisecond) }

	// Without a wave: at once.
	one := newSession("store-1", "uid-1")
	<-mark(one)
	if got := connected("store-1"); got != metav1.ConditionTrue {
		t.Fatalf("no wave: AgentConnected %s, want True", got)
	}

	// In a wave: after it.
	two := newSession("store-2", "uid-2")
	held := testutil.ToFloat64(waveDelayedStatusWrites.WithLabelValues("connected"))
	waves.Begin()
	written := mark(two)
	settle()
	if got := connected("store-2"); got != metav1.ConditionUnknown {
		t.Fatalf("in a wave: AgentConnected %s before the wave ended", got)
	}
	if d := testutil.ToFloat64(waveDelayedStatusWrites.WithLabelValues("connected")) - held; d != 1 {
		t.Fatalf("%v connected writes counted as held during the wave, want 1", d)
	}
	// A lost host does not wait.
	s.Disconnected(ctx, one)
	if got := connected("store-1"); got != metav1.ConditionFalse {
		t.Fatalf("in a wave: a lost host reads AgentConnected %s, want False at once", got)
	}
	waves.End()
	select {
	case <-written:
	case <-time.After(10 * time.Second):
		t.Fatal("the connected write still waits after the wave")
	}
	if got := connected("store-2"); got != metav1.ConditionTrue {
		t.Fatalf("after the wave: AgentConnected %s, want True", got)
	}

	// A host that already reads connected here needs no write: its new
	// session is not kept waiting for the wave.
	waves.Begin()
	select {
	case <-mark(newSession("store-2", "uid-2")):
	case <-time.After(10 * time.Second):
		t.Fatal("a host already recorded connected waits for the wave")
	}
	waves.End()

	// A session that ends while its write waits is not recorded connected.
	again := newSession("store-1", "uid-1")
	waves.Begin()
	written = mark(again)
	settle()
	close(again.done)
	waves.End()
	<-written
	if got := connected("store-1"); got != metav1.ConditionFalse {
		t.Fatalf("a session that ended in the wave: AgentConnected %s, want False", got)
	}

	// Not held at all when turned off.
	s.opts.WaveStatusDelay = -1
	waves.Begin()
	defer waves.End()
	select {
	case <-mark(newSession("store-1", "uid-1")):
	case <-time.After(10 * time.Second):
		t.Fatal("held in a wave with WaveStatusDelay negative")
	}
	if got := connected("store-1"); got != metav1.ConditionTrue {
		t.Fatalf("WaveStatusDelay negative: AgentConnected %s, want True", got)
	}
}

// testSession is a session as the writer sees it.
type testSession struct {
	peer     identity.Peer
	done     chan struct{}
	replaced bool
	reports  Reports
	// refreshBy is when the writer asked for lastSeenTime to be refreshed.
	refreshBy time.Time
}

func (t *testSession) Peer() identity.Peer   { return t.peer }
func (t *testSession) Done() <-chan struct{} { return t.done }
func (t *testSession) Replaced() bool        { return t.replaced }
func (t *testSession) Reports() *Reports     { return &t.reports }
func (t *testSession) RefreshLastSeenBy(at time.Time) {
	t.refreshBy = at
}

// noSessions is a replica holding no session.
type noSessions struct{}

func (noSessions) Current(string, string) Session { return nil }
