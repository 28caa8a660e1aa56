package linkhealth

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func TestCondition(t *testing.T) {
	th := Thresholds{RetransmitsToHubPerMinute: 10, RTT: time.Second}
	for _, tc := range []struct {
		name   string
		link   *infrav1.LinkHealth
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{"no report", nil, metav1.ConditionUnknown, infrav1.LinkNotReportedReason, "not reported"},
		{"healthy", &infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 2, HubRTTMilliseconds: ptr.To[int64](40)},
			metav1.ConditionFalse, infrav1.LinkHealthyReason, "Under the thresholds (10 TCP retransmissions/min to the hub, round-trip 1s)"},
		// 5 in 30 s is 10 a minute: at the threshold.
		{"retransmissions per minute scale with the window", &infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 30, TCPRetransmitsToHub: 5},
			metav1.ConditionTrue, infrav1.LinkDegradedReason, "TCP retransmissions to the hub at or over 10/min"},
		{"slow", &infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, HubRTTMilliseconds: ptr.To[int64](1200)},
			metav1.ConditionTrue, infrav1.LinkDegradedReason, "round-trip to the hub at or over 1s"},
		{"probe unavailable judges the RTT only", &infrav1.LinkHealth{Probe: infrav1.LinkProbeUnavailable, Message: "probe unavailable: no CAP_BPF",
			WindowSeconds: 60, TCPRetransmitsToHub: 500, HubRTTMilliseconds: ptr.To[int64](30)},
			metav1.ConditionFalse, infrav1.LinkHealthyReason, "retransmissions not measured: probe unavailable: no CAP_BPF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Condition(tc.link, th, false)
			if c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msg) {
				t.Errorf("got %s/%s %q, want %s/%s containing %q", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.msg)
			}
		})
	}
	// The healthy message does not follow the figures: no write per report.
	a := Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 1, HubRTTMilliseconds: ptr.To[int64](20)}, th, false)
	b := Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 3, HubRTTMilliseconds: ptr.To[int64](90)}, th, false)
	if a != b {
		t.Errorf("healthy conditions differ between reports: %+v vs %+v", a, b)
	}
	// Nor does a degraded one.
	a = Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 30}, th, false)
	b = Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 90}, th, true)
	if a != b {
		t.Errorf("degraded conditions differ between reports: %+v vs %+v", a, b)
	}
	// Hysteresis: 7/min keeps a degraded link degraded, but does not
	// degrade a healthy one; 4/min (under half the threshold) recovers.
	hover := &infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 7}
	if Condition(hover, th, true).Status != metav1.ConditionTrue || Condition(hover, th, false).Status != metav1.ConditionFalse {
		t.Error("no hysteresis at 7/min")
	}
	if Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 4}, th, true).Status != metav1.ConditionFalse {
		t.Error("4/min did not recover")
	}
	// A zero threshold is off.
	if c := Condition(&infrav1.LinkHealth{Probe: infrav1.LinkProbeRunning, WindowSeconds: 60, TCPRetransmitsToHub: 1000}, Thresholds{}, false); c.Status != metav1.ConditionFalse {
		t.Errorf("zero thresholds: %s", c.Status)
	}
}
