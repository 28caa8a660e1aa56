// Package linkhealth judges the link health agents report (status.link of
// an EdgeHost) against the hub's thresholds: the LinkDegraded condition.
// The EdgeHost reconciler sets the condition from it; the gateway uses the
// same verdict to decide when a new report is worth an API write.
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

// Condition is the LinkDegraded condition for a report (nil: none yet).
func Condition(l *infrav1.LinkHealth, t Thresholds) metav1.Condition {
	c := metav1.Condition{Type: infrav1.LinkDegradedCondition}
	if l == nil {
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, infrav1.LinkNotReportedReason, "The agent has not reported link health yet"
		return c
	}
	// A healthy verdict's message names the thresholds, not the figures
	// (they are in status.link): it stays the same from report to report,
	// so the condition costs no write of its own.
	var over []string
	healthy := "Under the thresholds"
	if l.Probe == infrav1.LinkProbeRunning {
		perMinute := float64(l.TCPRetransmitsToHub) * 60 / float64(max(l.WindowSeconds, 1))
		if t.RetransmitsToHubPerMinute > 0 && perMinute >= t.RetransmitsToHubPerMinute {
			over = append(over, fmt.Sprintf("%.1f retransmissions/min to the hub (threshold %g)", perMinute, t.RetransmitsToHubPerMinute))
		}
	}
	if l.HubRTTMilliseconds != nil {
		rtt := time.Duration(*l.HubRTTMilliseconds) * time.Millisecond
		if t.RTT > 0 && rtt >= t.RTT {
			over = append(over, fmt.Sprintf("round-trip %s to the hub (threshold %s)", rtt, t.RTT))
		}
	}
	healthy += fmt.Sprintf(" (%g TCP retransmissions/min to the hub, round-trip %s)", t.RetransmitsToHubPerMinute, t.RTT)
	if l.Probe != infrav1.LinkProbeRunning {
		healthy += "; retransmissions not measured: " + l.Message
	}
	if len(over) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, infrav1.LinkDegradedReason, strings.Join(over, "; ")
		return c
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, infrav1.LinkHealthyReason, healthy
	return c
}
