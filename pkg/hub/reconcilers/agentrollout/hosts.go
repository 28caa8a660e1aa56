package agentrollout

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// hostState is where one host of a roll-out is.
type hostState int

const (
	// stateIdle: not moved by this roll-out.
	stateIdle hostState = iota
	// stateMoving: ordered, not there yet.
	stateMoving
	// stateUpdated: its agent reports the ordered release.
	stateUpdated
	// stateFailed: it rolled the release back, or refused it.
	stateFailed
)

// trialClockSlack is how far before an order a trial's end (in the
// agent's clock) may be and still count as that order's.
const trialClockSlack = 2 * time.Minute

// stateOf is where h stands on order o (nil: not ordered): updated once
// its agent reports the version and no longer runs it on trial.
func stateOf(h *infrav1.EdgeHost, o *infrav1.AgentReleaseOrder) hostState {
	if o == nil {
		return stateIdle
	}
	r := h.Status.AgentRelease
	if h.Status.Facts.AgentVersion == o.Version && (r == nil || r.OnTrial != o.Version) {
		return stateUpdated
	}
	if r != nil {
		if t := r.Transfer; t != nil && t.Version == o.Version && t.State == infrav1.AgentTransferRefused {
			return stateFailed
		}
		if t := r.LastTrial; t != nil && t.Version == o.Version && t.State == infrav1.AgentTrialRolledBack &&
			t.Time.Add(trialClockSlack).After(o.Since.Time) {
			return stateFailed
		}
	}
	return stateMoving
}

// failure says why h failed order o, for a wave's message.
func failure(h *infrav1.EdgeHost, o *infrav1.AgentReleaseOrder) string {
	if r := h.Status.AgentRelease; r != nil {
		if t := r.Transfer; t != nil && t.Version == o.Version && t.State == infrav1.AgentTransferRefused {
			return h.Name + " refused it (" + t.Reason + ")"
		}
		if t := r.LastTrial; t != nil && t.Version == o.Version {
			return h.Name + " rolled it back: " + t.Reason
		}
	}
	return h.Name + " failed"
}

// connected tells that h's agent holds a session.
func connected(h *infrav1.EdgeHost) bool {
	return meta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition)
}

// member is a host with this roll-out's order.
type member struct {
	host  *infrav1.EdgeHost
	order *infrav1.AgentReleaseOrder
	state hostState
}

// membersOf are the hosts rollout has ordered, by wave.
func membersOf(rollout string, hosts []infrav1.EdgeHost) map[int32][]member {
	out := map[int32][]member{}
	for i := range hosts {
		h := &hosts[i]
		o := infrav1.AgentReleaseOrderOf(h)
		if o == nil || o.Rollout != rollout {
			continue
		}
		out[o.Wave] = append(out[o.Wave], member{host: h, order: o, state: stateOf(h, o)})
	}
	return out
}

func newOrder(r *infrav1.EdgeAgentRollout, h *infrav1.EdgeHost, wave int32, now time.Time) *infrav1.AgentReleaseOrder {
	trial := int32(0)
	if d := r.Spec.TrialDeadline; d != nil {
		trial = int32(d.Seconds())
	}
	return &infrav1.AgentReleaseOrder{Version: r.Spec.Version, Rollout: r.Name, Wave: wave, From: h.Status.Facts.AgentVersion,
		TrialSeconds: trial, Since: metav1.NewTime(now.UTC().Truncate(time.Second))}
}
