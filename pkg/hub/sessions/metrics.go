package sessions

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

var (
	connectedAgents = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_gateway_connected_agents",
		Help: "Agents with an open session on this hub replica.",
	})
	messages = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_messages_total",
		Help: "Protocol messages by direction (in, out) and type.",
	}, []string{"direction", "type"})
	rejectedFrames = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_rejected_frames_total",
		Help: "Frames rejected by reason (error code).",
	}, []string{"reason"})
	pushLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fleet_gateway_push_latency_seconds",
		Help:    "Time from a change seen in the informer to the desired state written to the agent's session.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
)

func init() {
	metrics.Registry.MustRegister(connectedAgents, messages, rejectedFrames, pushLatency)
}

// typeName names a message's type for metrics.
func typeName(msg any) string {
	t, err := wire.TypeOf(msg)
	if err != nil {
		return "unknown"
	}
	return string(t)
}
