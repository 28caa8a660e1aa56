package agentrollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// fleetOf makes n connected hosts on fleet-agent v1, able to update
// themselves, in groups of the zone label (group i%groups).
func fleetOf(n, groups int) []infrav1.EdgeHost {
	hosts := make([]infrav1.EdgeHost, n)
	for i := range hosts {
		h := &hosts[i]
		h.Name = fmt.Sprintf("h%02d", i)
		h.Namespace = "ns"
		h.Labels = map[string]string{infrav1.ZoneLabel: fmt.Sprintf("site-%d", i%groups)}
		h.Status.Facts.AgentVersion = "v1.0.0"
		h.Status.AgentRelease = &infrav1.AgentReleaseStatus{}
		h.Status.Conditions = []metav1.Condition{{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue}}
	}
	return hosts
}

func rolloutTo(version string) *infrav1.EdgeAgentRollout {
	one := int32(1)
	half := intstr.FromString("50%")
	all := intstr.FromString("100%")
	return &infrav1.EdgeAgentRollout{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: version, Canary: &one, WaveSize: &half, SuccessThreshold: &all,
			MaxUnavailable: &all, GroupBy: infrav1.ZoneLabel, TrialDeadline: &metav1.Duration{Duration: time.Minute}},
	}
}

type sim struct {
	t     *testing.T
	r     *infrav1.EdgeAgentRollout
	hosts []infrav1.EdgeHost
	now   time.Time
	notes []note
}

// reconcile runs a step and applies its orders to the hosts.
func (s *sim) reconcile() []string {
	s.t.Helper()
	s.now = s.now.Add(time.Minute)
	writes, notes := step(s.r, world{hosts: s.hosts, release: true, now: s.now, active: map[string]bool{}})
	s.notes = append(s.notes, notes...)
	var names []string
	for _, w := range writes {
		raw, _ := json.Marshal(w.order)
		h := s.host(w.host.Name)
		if h.Annotations == nil {
			h.Annotations = map[string]string{}
		}
		h.Annotations[infrav1.AgentReleaseAnnotation] = string(raw)
		names = append(names, h.Name)
	}
	return names
}

func (s *sim) host(name string) *infrav1.EdgeHost {
	for i := range s.hosts {
		if s.hosts[i].Name == name {
			return &s.hosts[i]
		}
	}
	s.t.Fatalf("no host %s", name)
	return nil
}

// agentsFollow makes every ordered host run its order (good), or roll it
// back (bad names).
func (s *sim) agentsFollow(bad ...string) {
	for i := range s.hosts {
		h := &s.hosts[i]
		o := infrav1.AgentReleaseOrderOf(h)
		if o == nil || h.Status.Facts.AgentVersion == o.Version {
			continue
		}
		if contains(bad, h.Name) && !o.Revert {
			h.Status.AgentRelease.LastTrial = &infrav1.AgentTrialStatus{Version: o.Version, State: infrav1.AgentTrialRolledBack,
				Reason: "fleet-agent " + o.Version + " stopped before it committed", Time: metav1.NewTime(s.now)}
			continue
		}
		h.Status.Facts.AgentVersion = o.Version
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *sim) running(version string) int {
	n := 0
	for _, h := range s.hosts {
		if h.Status.Facts.AgentVersion == version {
			n++
		}
	}
	return n
}

func (s *sim) waves() string {
	var out []string
	for _, w := range s.r.Status.Waves {
		out = append(out, fmt.Sprintf("%s:%s %d/%d", w.Name, w.State, w.Updated, w.Planned))
	}
	return strings.Join(out, " ")
}

func TestRolloutMovesCanaryThenWaves(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(5, 5), now: time.Unix(1e9, 0)}
	if got := s.reconcile(); len(got) != 1 || got[0] != "h00" {
		t.Fatalf("the canary wave ordered %v, want [h00]", got)
	}
	if w := s.waves(); w != "canary:Progressing 0/1 wave-1:Pending 0/3 wave-2:Pending 0/1" {
		t.Fatalf("waves %s", w)
	}
	if got := s.reconcile(); len(got) != 0 {
		t.Fatalf("a second host was ordered before the canary finished: %v", got)
	}
	s.agentsFollow()
	if got := s.reconcile(); len(got) != 3 {
		t.Fatalf("wave-1 ordered %v, want 3 hosts", got)
	}
	s.agentsFollow()
	if got := s.reconcile(); len(got) != 1 {
		t.Fatalf("wave-2 ordered %v, want 1 host", got)
	}
	s.agentsFollow()
	s.reconcile()
	if s.r.Status.Phase != infrav1.AgentRolloutComplete || s.running("v1.1.0") != 5 || s.r.Status.Updated != 5 {
		t.Fatalf("phase %s, %d hosts on v1.1.0, status %+v; waves %s", s.r.Status.Phase, s.running("v1.1.0"), s.r.Status, s.waves())
	}
	if w := s.waves(); w != "canary:Succeeded 1/1 wave-1:Succeeded 3/3 wave-2:Succeeded 1/1" {
		t.Fatalf("waves %s", w)
	}
}

func TestRolloutKeepsEachGroupWithinMaxUnavailable(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(9, 2), now: time.Unix(1e9, 0)}
	one := intstr.FromInt32(1)
	zero := int32(0)
	all := intstr.FromString("100%")
	s.r.Spec.MaxUnavailable, s.r.Spec.Canary, s.r.Spec.WaveSize = &one, &zero, &all
	for round := 0; s.r.Status.Phase != infrav1.AgentRolloutComplete; round++ {
		got := s.reconcile()
		groups := map[string]int{}
		for _, n := range got {
			groups[s.host(n).Labels[infrav1.ZoneLabel]]++
		}
		for g, n := range groups {
			if n > 1 {
				t.Fatalf("round %d ordered %d hosts of %s at once (%v); maxUnavailable is 1", round, n, g, got)
			}
		}
		if round > 0 && len(got) == 0 && s.r.Status.Phase != infrav1.AgentRolloutComplete {
			t.Fatalf("round %d ordered nothing; waves %s", round, s.waves())
		}
		s.agentsFollow()
		if round > 20 {
			t.Fatalf("not complete after 20 rounds: %s", s.waves())
		}
	}
}

func TestRolloutStopsWhenAWaveFails(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(5, 5), now: time.Unix(1e9, 0)}
	s.reconcile()
	s.agentsFollow("h00")
	if got := s.reconcile(); len(got) != 0 {
		t.Fatalf("hosts ordered after the canary failed: %v", got)
	}
	if s.r.Status.Phase != infrav1.AgentRolloutFailed {
		t.Fatalf("phase %s, want Failed", s.r.Status.Phase)
	}
	c := findCondition(s.r, ProgressingCondition)
	if c == nil || c.Reason != ThresholdExceededReason || !strings.Contains(c.Message, "h00 rolled it back") {
		t.Fatalf("Progressing %+v", c)
	}
	if got := s.reconcile(); len(got) != 0 || s.running("v1.1.0") != 0 {
		t.Fatalf("a failed roll-out went on: %v", got)
	}
}

func TestRolloutWaitsForApproval(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(3, 3), now: time.Unix(1e9, 0)}
	s.r.Spec.RequireApproval = true
	s.reconcile()
	s.agentsFollow()
	if got := s.reconcile(); len(got) != 0 || s.r.Status.Phase != infrav1.AgentRolloutWaitingForApproval {
		t.Fatalf("ordered %v without approval; phase %s", got, s.r.Status.Phase)
	}
	s.r.Spec.ApprovedWaves = 1
	if got := s.reconcile(); len(got) != 2 {
		t.Fatalf("approved wave-1 ordered %v", got)
	}
}

func TestRolloutPausesAndResumes(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(3, 3), now: time.Unix(1e9, 0)}
	s.r.Spec.Paused = true
	if got := s.reconcile(); len(got) != 0 || s.r.Status.Phase != infrav1.AgentRolloutPaused {
		t.Fatalf("a paused roll-out ordered %v; phase %s", got, s.r.Status.Phase)
	}
	s.r.Spec.Paused = false
	if got := s.reconcile(); len(got) != 1 {
		t.Fatalf("resumed: ordered %v", got)
	}
}

func TestAbortRevertsTheLastWaveFirst(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(5, 5), now: time.Unix(1e9, 0)}
	s.reconcile()
	s.agentsFollow()
	wave1 := s.reconcile()
	s.agentsFollow()
	s.r.Spec.Abort = true
	got := s.reconcile()
	if len(got) != 3 || !contains(got, wave1[0]) || !contains(got, wave1[2]) {
		t.Fatalf("abort ordered %v back first, want wave-1's %v", got, wave1)
	}
	if s.r.Status.Phase != infrav1.AgentRolloutAborting || s.host("h00").Status.Facts.AgentVersion != "v1.1.0" {
		t.Fatalf("phase %s; the canary moved back before wave-1", s.r.Status.Phase)
	}
	if got := s.reconcile(); len(got) != 0 {
		t.Fatalf("the canary was ordered back before wave-1 was back: %v", got)
	}
	s.agentsFollow()
	if got := s.reconcile(); len(got) != 1 || got[0] != "h00" {
		t.Fatalf("then ordered %v back, want the canary h00", got)
	}
	s.agentsFollow()
	s.reconcile()
	if s.r.Status.Phase != infrav1.AgentRolloutAborted || s.running("v1.0.0") != 5 {
		t.Fatalf("phase %s, %d hosts on v1.0.0; waves %s", s.r.Status.Phase, s.running("v1.0.0"), s.waves())
	}
	if o := infrav1.AgentReleaseOrderOf(s.host("h00")); o == nil || !o.Revert || o.Version != "v1.0.0" || o.From != "v1.1.0" {
		t.Fatalf("the canary's order %+v", o)
	}
}

func TestRolloutSkipsAgentsThatCannotUpdateThemselves(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(2, 2), now: time.Unix(1e9, 0)}
	s.hosts[1].Status.AgentRelease = nil
	s.reconcile()
	s.agentsFollow()
	s.reconcile()
	c := findCondition(s.r, CompleteCondition)
	if s.r.Status.Phase != infrav1.AgentRolloutComplete || c == nil || c.Reason != HostsPendingReason || !strings.Contains(c.Message, "1 run an agent that cannot update itself") {
		t.Fatalf("phase %s, Complete %+v", s.r.Status.Phase, c)
	}
}

func TestRolloutLeavesHostsOfAnotherRolloutUnderWay(t *testing.T) {
	s := &sim{t: t, r: rolloutTo("v1.1.0"), hosts: fleetOf(2, 2), now: time.Unix(1e9, 0)}
	raw, _ := json.Marshal(infrav1.AgentReleaseOrder{Version: "v1.2.0", Rollout: "other"})
	s.hosts[0].Annotations = map[string]string{infrav1.AgentReleaseAnnotation: string(raw)}
	writes, _ := step(s.r, world{hosts: s.hosts, release: true, now: s.now, active: map[string]bool{"other": true}})
	for _, w := range writes {
		if w.host.Name == "h00" {
			t.Fatalf("ordered a host another roll-out under way moves")
		}
	}
}

func findCondition(r *infrav1.EdgeAgentRollout, t string) *metav1.Condition {
	for i := range r.Status.Conditions {
		if r.Status.Conditions[i].Type == t {
			return &r.Status.Conditions[i]
		}
	}
	return nil
}
