package describe

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A roll-out that stopped shows its waves and, for each host not done,
// where it stands and why.
func TestWriteRollout(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "stores"},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.4"},
		Status: infrav1.EdgeAgentRolloutStatus{Phase: infrav1.AgentRolloutFailed, Hosts: 3, Failed: 1, StartTime: ago(time.Minute),
			Waves: []infrav1.AgentRolloutWave{{Name: "canary", State: infrav1.AgentWaveFailed, Planned: 1, Hosts: 1, Failed: 1, StartTime: ago(time.Minute),
				Message: "kiosk-1 rolled it back: it exited"}, {Name: "wave-1", State: infrav1.AgentWavePending, Planned: 2}},
			Conditions: []metav1.Condition{{Type: "Progressing", Status: metav1.ConditionFalse, Reason: "ThresholdExceeded", Message: "wave canary: 1 of 1 hosts failed"}}},
	}
	h := infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "kiosk-1", Annotations: map[string]string{
		infrav1.AgentReleaseAnnotation: `{"version":"v0.9.4","rollout":"r1","wave":0,"from":"v0.9.2","since":"2026-12-06T11:59:00Z"}`}}}
	h.Status.Facts.AgentVersion = "v0.9.2"
	h.Status.AgentRelease = &infrav1.AgentReleaseStatus{LastTrial: &infrav1.AgentTrialStatus{Version: "v0.9.4", State: infrav1.AgentTrialRolledBack,
		Reason: "fleet-agent v0.9.4 stopped before it committed"}}
	var out strings.Builder
	if err := WriteRollout(&out, ro, []infrav1.EdgeHost{h}, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Phase:      Failed", "Hosts:      3 (0 on v0.9.4, 1 failed)",
		"* canary  Failed   1/1    0        1       0         60s ago  kiosk-1 rolled it back: it exited",
		"  wave-1  Pending  0/2", "kiosk-1  canary  v0.9.2  v0.9.2  to v0.9.4  rolled back: fleet-agent v0.9.4 stopped before it committed; agent not connected",
		"Progressing  False   ThresholdExceeded  wave canary: 1 of 1 hosts failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
}
