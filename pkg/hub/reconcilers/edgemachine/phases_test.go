package edgemachine

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func TestValidateBootstrapSecret(t *testing.T) {
	tests := []struct {
		name string
		data map[string][]byte
		want string // substring of the refusal, "" for accepted
	}{
		{"cloud-config", map[string][]byte{"value": []byte("#cloud-config"), "format": []byte("cloud-config")}, ""},
		{"no format key (older providers)", map[string][]byte{"value": []byte("#cloud-config")}, ""},
		{"no value", map[string][]byte{"format": []byte("cloud-config")}, `no data under key "value"`},
		{"empty value", map[string][]byte{"value": {}}, `no data under key "value"`},
		{"ignition", map[string][]byte{"value": []byte("{}"), "format": []byte("ignition")}, "ignition format"},
		{"unknown format", map[string][]byte{"value": []byte("x"), "format": []byte("talos")}, `unknown format "talos"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validateBootstrapSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: tt.data})
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("validateBootstrapSecret() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A machine found holding two hosts (a claim the API server applied after
// the client had given up on it) keeps the one it reports and gives the
// other back, whatever order the list comes in.
func TestKeepOneHostReleasesTheExtra(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = infrav1.AddToScheme(scheme)
	em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: "pm", Namespace: "ns", UID: "em-uid"}}
	em.Status.HostRef = "b"
	claimed := func(name string) *infrav1.EdgeHost {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: 2,
			Labels: map[string]string{infrav1.ClaimedByLabel: "pm"}},
			Spec: infrav1.EdgeHostSpec{ClaimRef: &infrav1.HostClaimReference{Name: "pm", UID: "em-uid"}}}
		return h
	}
	free := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(claimed("a"), claimed("b"), free).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10)}
	list := &infrav1.EdgeHostList{}
	if err := c.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	kept, err := r.keepOneHost(ctx, em, list.Items)
	if err != nil || kept == nil || kept.Name != "b" {
		t.Fatalf("kept %v, %v", kept, err)
	}
	a := &infrav1.EdgeHost{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "a"}, a); err != nil {
		t.Fatal(err)
	}
	if a.Spec.ClaimRef != nil || a.Labels[infrav1.ClaimedByLabel] != "" || a.Annotations[infrav1.ReleasedAtGenerationAnnotation] == "" {
		t.Errorf("extra host not released: claim %v labels %v annotations %v", a.Spec.ClaimRef, a.Labels, a.Annotations)
	}
	// One host: nothing to do.
	if kept, err := r.keepOneHost(ctx, em, []infrav1.EdgeHost{*claimed("b"), *free}); err != nil || kept.Name != "b" {
		t.Fatalf("single: %v, %v", kept, err)
	}
}

// HostAgentConnected follows the host's AgentConnected and its message
// depends only on the host's transition, never on lastSeenTime, so a
// refresh of the host writes nothing here; it emits an event only when it
// changes.
func TestHostAgentConnectedMirrorsTheHost(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name       string
		host       *metav1.Condition
		status     metav1.ConditionStatus
		reason, in string
	}{
		{"connected", &metav1.Condition{Status: metav1.ConditionTrue, Reason: "Connected"}, metav1.ConditionTrue, infrav1.AgentConnectedReason, ""},
		{"gone", &metav1.Condition{Status: metav1.ConditionFalse, Reason: "Disconnected"}, metav1.ConditionFalse, infrav1.AgentDisconnectedReason,
			"The agent of EdgeHost h1 has been disconnected since 2026-12-01T09:00:00Z"},
		{"contact lost", &metav1.Condition{Status: metav1.ConditionUnknown, Reason: "ContactLost", Message: "No word from hub replica"},
			metav1.ConditionUnknown, infrav1.AgentConnectivityUnknownReason, "lost track of the agent of EdgeHost h1 at 2026-12-01T09:00:00Z: No word"},
		{"never connected", nil, metav1.ConditionUnknown, infrav1.AgentConnectivityUnknownReason, "no word on the agent of EdgeHost h1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h1"}}
			if tc.host != nil {
				c := *tc.host
				c.Type, c.LastTransitionTime = infrav1.AgentConnectedCondition, since
				host.Status.Conditions = []metav1.Condition{c}
			}
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Recorder: rec}
			em := &infrav1.EdgeMachine{}
			for range 2 {
				now := metav1.Now()
				host.Status.LastSeenTime = &now
				if _, err := r.reconcileHostAgent(context.Background(), &scope{edgeMachine: em, host: host}); err != nil {
					t.Fatal(err)
				}
			}
			c := conditions.Get(em, infrav1.HostAgentConnectedCondition)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.in) {
				t.Errorf("HostAgentConnected %+v, want %s %s %q", c, tc.status, tc.reason, tc.in)
			}
			if n := len(rec.Events); n != 1 {
				t.Errorf("%d events for one change", n)
			}
		})
	}
}
