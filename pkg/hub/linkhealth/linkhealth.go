package linkhealth

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Thresholds at or above which a link is degraded; zero turns one off.
type Thresholds struct {
	// RetransmitsToHubPerMinute counts TCP segments the agent resent to
	// the hub: its own link, not the site's workloads.
	RetransmitsToHubPerMinute float64
	// RTT is the round-trip time of a ping to the hub over the session.
	RTT time.Duration
}

// DefaultThresholds suit a site link that should be fine: a healthy TCP
// connection to the hub resends next to nothing while idle, and a
// round-trip over a second and a half makes every API call through the
// hub sluggish.
func DefaultThresholds() Thresholds {
	return Thresholds{RetransmitsToHubPerMinute: 10, RTT: 1500 * time.Millisecond}
}

// recoverBelow is the share of a threshold a degraded link must fall
// under to count as healthy again: without it, a link hovering at a
// threshold would flip the verdict (and cost writes and events) every
// window.
const recoverBelow = 0.5

// HostCondition is the LinkDegraded condition of a host whose agent is
// connected or not; was is the host's current one. A disconnected agent's
// last report says nothing about a link that is down now. It is written
// together with AgentConnected, so that a connect or a disconnect costs
// the API server one write rather than two.
func HostCondition(l *infrav1.LinkHealth, connected bool, t Thresholds, was *metav1.Condition) metav1.Condition {
	if !connected {
		return metav1.Condition{Type: infrav1.LinkDegradedCondition, Status: metav1.ConditionUnknown,
			Reason: infrav1.LinkNotReportedReason, Message: "The agent is disconnected"}
	}
	return Condition(l, t, was != nil && was.Status == metav1.ConditionTrue)
}

// Condition is the LinkDegraded condition for a report (nil: none yet);
// wasDegraded is the current verdict, for hysteresis. Messages name the
// thresholds, never the figures (they are in status.link), so a verdict
// that holds costs no write from one report to the next.
func Condition(l *infrav1.LinkHealth, t Thresholds, wasDegraded bool) metav1.Condition {
	c := metav1.Condition{Type: infrav1.LinkDegradedCondition}
	if l == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, infrav1.LinkNotReportedReason, "The agent has not reported link health yet"
		return c
	}
	scale := 1.0
	if wasDegraded {
		scale = recoverBelow
	}
	var over []string
	if l.Probe == infrav1.LinkProbeRunning {
		perMinute := float64(l.TCPRetransmitsToHub) * 60 / float64(max(l.WindowSeconds, 1))
		if t.RetransmitsToHubPerMinute > 0 && perMinute >= t.RetransmitsToHubPerMinute*scale {
			over = append(over, fmt.Sprintf("TCP retransmissions to the hub at or over %g/min", t.RetransmitsToHubPerMinute))
		}
	}
	if l.HubRTTMilliseconds != nil {
		rtt := time.Duration(*l.HubRTTMilliseconds) * time.Millisecond
		if t.RTT > 0 && float64(rtt) >= float64(t.RTT)*scale {
			over = append(over, fmt.Sprintf("round-trip to the hub at or over %s", t.RTT))
		}
	}
	if len(over) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, infrav1.LinkDegradedReason, strings.Join(over, "; ")+" (figures in status.link)"
		return c
	}
	healthy := fmt.Sprintf("Under the thresholds (%g TCP retransmissions/min to the hub, round-trip %s)", t.RetransmitsToHubPerMinute, t.RTT)
	if l.Probe != infrav1.LinkProbeRunning {
		healthy += "; retransmissions not measured: " + l.Message
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, infrav1.LinkHealthyReason, healthy
	return c
}
