package agentrollout

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Conditions and reasons on an EdgeAgentRollout.
const (
	// ProgressingCondition is True while hosts are being moved.
	ProgressingCondition = "Progressing"
	// CompleteCondition is True once every selected host runs the version.
	CompleteCondition = "Complete"

	WavesProgressingReason   = "WavesProgressing"
	PausedReason             = "Paused"
	WaitingForApprovalReason = "WaitingForApproval"
	ThresholdExceededReason  = "ThresholdExceeded"
	ReleaseNotFoundReason    = "ReleaseNotFound"
	InvalidSpecReason        = "InvalidSpec"
	AbortingReason           = "Aborting"
	AbortedReason            = "Aborted"
	CompleteReason           = "Complete"
	HostsPendingReason       = "HostsPending"
)

// minTrial is the shortest trial deadline: a new agent must start and
// reconnect through the site's network in it.
const minTrial = 10 * time.Second

// write is one order to put on a host.
type write struct {
	host  *infrav1.EdgeHost
	order *infrav1.AgentReleaseOrder
}

// note is one thing worth an Event on the roll-out.
type note struct {
	warning        bool
	reason, action string
	message        string
}

// world is what a step sees.
type world struct {
	hosts []infrav1.EdgeHost
	// release is true when an EdgeAgentRelease of the namespace has the
	// version.
	release bool
	// active names the namespace's other roll-outs under way: their hosts
	// are theirs until they end.
	active map[string]bool
	now    time.Time
}

// step moves the roll-out one step: it sets r's status and returns the
// orders to write and the events to record.
func step(r *infrav1.EdgeAgentRollout, w world) ([]write, []note) {
	s := &r.Status
	s.ObservedGeneration = r.Generation
	if s.StartTime == nil {
		t := metav1.NewTime(w.now)
		s.StartTime = &t
	}
	sel, err := selectorOf(r)
	if err != nil {
		setProgressing(r, metav1.ConditionFalse, InvalidSpecReason, "spec.selector: "+err.Error())
		return nil, nil
	}
	if d := r.Spec.TrialDeadline; d != nil && d.Duration < minTrial {
		// Not Failed: fixing the spec lets it go on.
		setProgressing(r, metav1.ConditionFalse, InvalidSpecReason, fmt.Sprintf("spec.trialDeadline %s: a new agent needs at least %s to reconnect", d.Duration, minTrial))
		return nil, nil
	}
	members := membersOf(r.Name, w.hosts)
	var selected, eligible []*infrav1.EdgeHost
	unable := 0
	for i := range w.hosts {
		h := &w.hosts[i]
		if !h.DeletionTimestamp.IsZero() || !sel.Matches(labels.Set(h.Labels)) {
			continue
		}
		selected = append(selected, h)
		if o := infrav1.AgentReleaseOrderOf(h); o != nil && (o.Rollout == r.Name || w.active[o.Rollout]) || h.Status.Facts.AgentVersion == r.Spec.Version {
			// Moved already, or moving under another roll-out under way.
			continue
		}
		if h.Status.AgentRelease == nil {
			// An agent that predates self-update, or never connected.
			unable++
			continue
		}
		eligible = append(eligible, h)
	}
	count(r, selected, members)

	if r.Spec.Abort {
		return abort(r, members, w.now)
	}
	if s.Phase == infrav1.AgentRolloutFailed || s.Phase == infrav1.AgentRolloutComplete {
		// Ended: hosts enrolled since run what they were installed with
		// until a new roll-out moves them.
		return nil, nil
	}
	if len(s.Waves) == 0 {
		// Hosts ordered already count: a reconcile may see its own
		// orders before the status that planned them (a stale cache).
		moved := 0
		for _, ms := range members {
			moved += len(ms)
		}
		plan(r, len(eligible)+moved)
	}
	waveStats(r, members)

	// A wave past its threshold stops the roll-out.
	for i := range s.Waves {
		wv := &s.Waves[i]
		if wv.Failed > allowedFailures(r, max(wv.Planned, wv.Hosts)) {
			wv.State = infrav1.AgentWaveFailed
			wv.Message = failures(members[int32(i)], r)
			if wv.CompletionTime == nil {
				t := metav1.NewTime(w.now)
				wv.CompletionTime = &t
			}
			s.Phase, s.CurrentWave = infrav1.AgentRolloutFailed, int32(i)
			t := metav1.NewTime(w.now)
			s.CompletionTime = &t
			msg := fmt.Sprintf("wave %s: %d of %d hosts failed, more than its success threshold allows; no more hosts are moved (abort to move the others back): %s",
				wv.Name, wv.Failed, wv.Hosts, wv.Message)
			setProgressing(r, metav1.ConditionFalse, ThresholdExceededReason, msg)
			return nil, []note{{warning: true, reason: ThresholdExceededReason, action: "Stop", message: msg}}
		}
	}
	if !w.release {
		setProgressing(r, metav1.ConditionFalse, ReleaseNotFoundReason,
			fmt.Sprintf("no EdgeAgentRelease of namespace %s has version %s; create one (docs/AGENT-RELEASES.md)", r.Namespace, r.Spec.Version))
		s.Phase = infrav1.AgentRolloutProgressing
		return nil, nil
	}

	var writes []write
	var notes []note
	for {
		// The current wave: the first not succeeded.
		cur := -1
		for i := range s.Waves {
			if s.Waves[i].State != infrav1.AgentWaveSucceeded {
				cur = i
				break
			}
		}
		if cur < 0 {
			if len(eligible) == 0 {
				return writes, append(notes, completeEvents(r, unable, w.now)...)
			}
			// Hosts that appeared after the plan join a last wave.
			s.Waves = append(s.Waves, infrav1.AgentRolloutWave{Name: waveName(r, len(s.Waves)), State: infrav1.AgentWavePending})
			cur = len(s.Waves) - 1
		}
		s.CurrentWave = int32(cur)
		wv := &s.Waves[cur]
		if cur == len(s.Waves)-1 || len(eligible) == 0 {
			// The last wave takes every host left, however many came
			// since; a wave with none left to take is as full as it gets.
			wv.Planned = wv.Hosts + int32(len(eligible))
		}
		if wv.Hosts == 0 && wv.Planned > 0 {
			switch {
			case r.Spec.Paused:
				s.Phase = infrav1.AgentRolloutPaused
				setProgressing(r, metav1.ConditionFalse, PausedReason, "paused before wave "+wv.Name)
				return writes, notes
			case r.Spec.RequireApproval && cur > 0 && r.Spec.ApprovedWaves < int32(cur):
				s.Phase = infrav1.AgentRolloutWaitingForApproval
				wv.Message = "waiting for approval (kubectl fleet agent approve " + r.Name + ")"
				setProgressing(r, metav1.ConditionFalse, WaitingForApprovalReason, fmt.Sprintf("wave %s waits for approval: kubectl fleet agent approve %s", wv.Name, r.Name))
				return writes, notes
			}
		}
		if r.Spec.Paused {
			s.Phase = infrav1.AgentRolloutPaused
			setProgressing(r, metav1.ConditionFalse, PausedReason, fmt.Sprintf("paused in wave %s; the %d hosts moving finish", wv.Name, wv.Hosts-wv.Updated-wv.Failed))
			return writes, notes
		}
		s.Phase = infrav1.AgentRolloutProgressing
		ws := fill(r, int32(cur), wv, eligible, selected, members, w.now)
		if wv.Hosts == 0 && len(ws) > 0 {
			notes = append(notes, note{reason: "WaveStarted", action: "Start", message: fmt.Sprintf("wave %s started: %d hosts to %s", wv.Name, wv.Planned, r.Spec.Version)})
		}
		if wv.StartTime == nil && wv.Hosts+int32(len(ws)) > 0 {
			t := metav1.NewTime(w.now)
			wv.StartTime = &t
		}
		writes = append(writes, ws...)
		eligible = slices.DeleteFunc(eligible, func(h *infrav1.EdgeHost) bool {
			return slices.ContainsFunc(ws, func(x write) bool { return x.host == h })
		})
		for _, x := range ws {
			members[int32(cur)] = append(members[int32(cur)], member{host: x.host, order: x.order, state: stateMoving})
		}
		wv.Hosts += int32(len(ws))
		moving := wv.Hosts - wv.Updated - wv.Failed
		if wv.Hosts < wv.Planned || moving > 0 {
			wv.State = infrav1.AgentWaveProgressing
			wv.Message = waveMessage(wv, moving, int32(len(ws)))
			setProgressing(r, metav1.ConditionTrue, WavesProgressingReason, fmt.Sprintf("wave %s (%d of %d): %d of %d hosts run %s",
				wv.Name, cur+1, len(s.Waves), wv.Updated, wv.Planned, r.Spec.Version))
			return writes, notes
		}
		wv.State, wv.Message = infrav1.AgentWaveSucceeded, ""
		if wv.CompletionTime == nil {
			t := metav1.NewTime(w.now)
			wv.CompletionTime = &t
		}
		notes = append(notes, note{reason: "WaveSucceeded", action: "Complete", message: fmt.Sprintf("wave %s: %d of %d hosts run %s", wv.Name, wv.Updated, wv.Hosts, r.Spec.Version)})
	}
}

func waveMessage(wv *infrav1.AgentRolloutWave, moving, ordered int32) string {
	switch {
	case moving > 0:
		return fmt.Sprintf("%d hosts moving", moving)
	case wv.Hosts < wv.Planned && ordered == 0:
		return "waiting for a place in the hosts' groups (maxUnavailable)"
	}
	return ""
}

// fill orders hosts of wave cur until it has its planned number, within
// each group's maxUnavailable; connected hosts first.
func fill(r *infrav1.EdgeAgentRollout, cur int32, wv *infrav1.AgentRolloutWave, eligible, selected []*infrav1.EdgeHost,
	members map[int32][]member, now time.Time) []write {
	room := wv.Planned - wv.Hosts
	if room <= 0 {
		return nil
	}
	key := r.Spec.GroupBy
	size, moving := map[string]int{}, map[string]int{}
	for _, h := range selected {
		size[h.Labels[key]]++
	}
	for _, ms := range members {
		for _, m := range ms {
			if m.state == stateMoving {
				moving[m.host.Labels[key]]++
			}
		}
	}
	sort.SliceStable(eligible, func(i, j int) bool {
		ci, cj := connected(eligible[i]), connected(eligible[j])
		if ci != cj {
			return ci
		}
		return eligible[i].Name < eligible[j].Name
	})
	var out []write
	for _, h := range eligible {
		if int32(len(out)) >= room {
			break
		}
		g := h.Labels[key]
		if moving[g] >= maxUnavailable(r, size[g]) {
			continue
		}
		moving[g]++
		out = append(out, write{host: h, order: newOrder(r, h, cur, now)})
	}
	return out
}

// abort moves the hosts the roll-out moved back, the last wave first: a
// wave's hosts are ordered back once every later wave's are back (or
// offline, to go back when they return).
func abort(r *infrav1.EdgeAgentRollout, members map[int32][]member, now time.Time) ([]write, []note) {
	s := &r.Status
	var evs []note
	if s.Phase != infrav1.AgentRolloutAborting && s.Phase != infrav1.AgentRolloutAborted {
		evs = append(evs, note{warning: true, reason: AbortingReason, action: "Abort", message: "aborted: moving the hosts moved back, the last wave first"})
	}
	var writes []write
	pending := false
	for i := len(s.Waves) - 1; i >= 0; i-- {
		wv := &s.Waves[i]
		ms := members[int32(i)]
		if len(ms) == 0 {
			continue
		}
		back, waiting := int32(0), false
		var stuck []string
		for _, m := range ms {
			o := m.order
			switch {
			case o.Revert && m.host.Status.Facts.AgentVersion == o.Version:
				back++
			case o.Revert && m.state == stateFailed:
				// It refused to go back (the release before is below its
				// floor, or it no longer holds it): it keeps what it runs.
				stuck = append(stuck, failure(m.host, o))
			case o.Revert:
				waiting = waiting || connected(m.host)
			case o.From == "" || o.From == o.Version:
				back++
			case m.state == stateFailed || m.host.Status.Facts.AgentVersion == o.From:
				// It never left the release it ran: nothing to revert,
				// but the order goes so the host is not told to retry.
				writes = append(writes, write{host: m.host, order: revertOrder(o, now)})
				back++
			default:
				if !pending {
					writes = append(writes, write{host: m.host, order: revertOrder(o, now)})
				}
				waiting = true
			}
		}
		wv.Reverted = back
		if len(stuck) > 0 {
			wv.Message = truncate("could not go back: "+strings.Join(stuck, "; "), 1024)
		}
		if waiting || pending {
			wv.State = infrav1.AgentWaveReverting
			pending = true
			continue
		}
		wv.State = infrav1.AgentWaveReverted
	}
	if pending {
		s.Phase = infrav1.AgentRolloutAborting
		setProgressing(r, metav1.ConditionTrue, AbortingReason, "aborted: moving the hosts moved back to the release each ran before, the last wave first")
		return writes, evs
	}
	if s.Phase != infrav1.AgentRolloutAborted {
		evs = append(evs, note{reason: AbortedReason, action: "Abort", message: "aborted: every host moved is back on the release it ran before (or will be once it reconnects)"})
		t := metav1.NewTime(now)
		s.CompletionTime = &t
	}
	s.Phase = infrav1.AgentRolloutAborted
	setProgressing(r, metav1.ConditionFalse, AbortedReason, "aborted; the hosts moved are back on the release each ran before")
	return writes, evs
}

func revertOrder(o *infrav1.AgentReleaseOrder, now time.Time) *infrav1.AgentReleaseOrder {
	return &infrav1.AgentReleaseOrder{Version: o.From, Rollout: o.Rollout, Wave: o.Wave, From: o.Version, Revert: true,
		TrialSeconds: o.TrialSeconds, Since: metav1.NewTime(now.UTC().Truncate(time.Second))}
}

func completeEvents(r *infrav1.EdgeAgentRollout, unable int, now time.Time) []note {
	s := &r.Status
	first := s.Phase != infrav1.AgentRolloutComplete
	s.Phase = infrav1.AgentRolloutComplete
	if s.CompletionTime == nil {
		t := metav1.NewTime(now)
		s.CompletionTime = &t
	}
	msg := fmt.Sprintf("%d of %d hosts run %s", s.Updated, s.Hosts, r.Spec.Version)
	reason := CompleteReason
	if unable > 0 {
		msg += fmt.Sprintf("; %d run an agent that cannot update itself (reinstall or re-image them)", unable)
		reason = HostsPendingReason
	}
	setProgressing(r, metav1.ConditionFalse, CompleteReason, "complete: "+msg)
	conditions.Set(r, metav1.Condition{Type: CompleteCondition, Status: metav1.ConditionTrue, Reason: reason, Message: msg})
	if !first {
		return nil
	}
	return []note{{reason: CompleteReason, action: "Complete", message: "roll-out complete: " + msg}}
}

// plan splits n hosts into the canary and the waves.
func plan(r *infrav1.EdgeAgentRollout, n int) {
	canary := 1
	if r.Spec.Canary != nil {
		canary = int(*r.Spec.Canary)
	}
	canary = min(canary, n)
	size := max(scaled(r.Spec.WaveSize, n, "25%", true), 1)
	var waves []infrav1.AgentRolloutWave
	if canary > 0 {
		waves = append(waves, infrav1.AgentRolloutWave{Name: "canary", State: infrav1.AgentWavePending, Planned: int32(canary)})
	}
	for left := n - canary; left > 0; left -= size {
		waves = append(waves, infrav1.AgentRolloutWave{Name: fmt.Sprintf("wave-%d", len(waves)+boolInt(canary == 0)),
			State: infrav1.AgentWavePending, Planned: int32(min(size, left))})
	}
	if len(waves) == 0 {
		waves = append(waves, infrav1.AgentRolloutWave{Name: "wave-1", State: infrav1.AgentWavePending})
	}
	r.Status.Waves = waves
}

func waveName(r *infrav1.EdgeAgentRollout, i int) string {
	if len(r.Status.Waves) > 0 && r.Status.Waves[0].Name == "canary" {
		return fmt.Sprintf("wave-%d", i)
	}
	return fmt.Sprintf("wave-%d", i+1)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waveStats counts each wave's members.
func waveStats(r *infrav1.EdgeAgentRollout, members map[int32][]member) {
	for i := range r.Status.Waves {
		wv := &r.Status.Waves[i]
		wv.Hosts, wv.Updated, wv.Failed = 0, 0, 0
		for _, m := range members[int32(i)] {
			wv.Hosts++
			switch m.state {
			case stateUpdated:
				wv.Updated++
			case stateFailed:
				wv.Failed++
			}
		}
	}
}

// count sets the roll-out's totals.
func count(r *infrav1.EdgeAgentRollout, selected []*infrav1.EdgeHost, members map[int32][]member) {
	s := &r.Status
	s.Hosts, s.Updated, s.Failed = 0, 0, 0
	seen := map[string]bool{}
	for _, h := range selected {
		seen[h.Name] = true
		s.Hosts++
		if h.Status.Facts.AgentVersion == r.Spec.Version {
			s.Updated++
		}
	}
	for _, ms := range members {
		for _, m := range ms {
			if !seen[m.host.Name] {
				s.Hosts++
				if m.state == stateUpdated {
					s.Updated++
				}
			}
			if m.state == stateFailed && !m.order.Revert {
				s.Failed++
			}
		}
	}
}

func failures(ms []member, r *infrav1.EdgeAgentRollout) string {
	var out []string
	for _, m := range ms {
		if m.state == stateFailed {
			out = append(out, failure(m.host, m.order))
		}
	}
	sort.Strings(out)
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("and %d more", len(out)-3))
	}
	return strings.Join(out, "; ")
}

// allowedFailures is how many of a wave's hosts may fail.
func allowedFailures(r *infrav1.EdgeAgentRollout, hosts int32) int32 {
	need := scaled(r.Spec.SuccessThreshold, int(hosts), "100%", true)
	return max(hosts-int32(min(need, int(hosts))), 0)
}

// maxUnavailable is how many of a group of size hosts may move at once.
func maxUnavailable(r *infrav1.EdgeAgentRollout, size int) int {
	return max(scaled(r.Spec.MaxUnavailable, size, "25%", false), 1)
}

// scaled is v (or def) of total, a percentage rounded up or down.
func scaled(v *intstr.IntOrString, total int, def string, up bool) int {
	d := intstr.FromString(def)
	if v == nil {
		v = &d
	}
	if v.Type == intstr.Int {
		return v.IntValue()
	}
	p, err := intstr.GetScaledValueFromIntOrPercent(v, 100, false)
	if err != nil {
		p, _ = intstr.GetScaledValueFromIntOrPercent(&d, 100, false)
	}
	f := float64(total) * float64(p) / 100
	if up {
		return int(math.Ceil(f))
	}
	return int(math.Floor(f))
}

func selectorOf(r *infrav1.EdgeAgentRollout) (labels.Selector, error) {
	if r.Spec.Selector == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(r.Spec.Selector)
}

func setProgressing(r *infrav1.EdgeAgentRollout, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(r, metav1.Condition{Type: ProgressingCondition, Status: status, Reason: reason, Message: truncate(msg, 1024)})
	if r.Status.Phase != infrav1.AgentRolloutComplete {
		conditions.Set(r, metav1.Condition{Type: CompleteCondition, Status: metav1.ConditionFalse, Reason: reason, Message: truncate(msg, 1024)})
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
