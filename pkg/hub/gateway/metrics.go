package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	connectedAgents = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_gateway_connected_agents",
		Help: "Agents with an open session on this hub replica.",
	})
	handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_handshakes_total",
		Help: "Session handshakes by result (ok, no_certificate, revoked, busy, upgrade_failed, bad_hello).",
	}, []string{"result"})
	tlsHandshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_tls_handshakes_total",
		Help: "TLS handshakes on the gateway by result (ok, failed, busy: no place among --max-concurrent-tls-handshakes in time, the connection was closed).",
	}, []string{"result"})
	enrollments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_enrollments_total",
		Help: "Enrollment attempts by result (ok, malformed, unknown, expired, used_up, revoked, rate_limited, busy, bad_request, error).",
	}, []string{"result"})
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
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_total",
		Help: "EdgeHost status writes by cause (report, connected, disconnected, last_seen).",
	}, []string{"cause"})
	crowdMemoryReturns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleet_gateway_crowd_memory_returns_total",
		Help: "Connection waves (TLS handshakes queued for a place) after which the hub returned its free memory to the operating system.",
	})
	waveDelayedStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_wave_delayed_total",
		Help: "EdgeHost status writes held back (counted as they start to wait) while a wave of connections queued for TLS handshake places (see --wave-status-delay), by cause (connected, last_seen).",
	}, []string{"cause"})
	skippedStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_skipped_total",
		Help: "EdgeHost status writes found unnecessary by cause (connected: a reconnect to a host that already reads as connected to this replica; disconnected: an agent back within the disconnect grace).",
	}, []string{"cause"})
)

func init() {
	metrics.Registry.MustRegister(connectedAgents, handshakes, tlsHandshakes, enrollments, messages, rejectedFrames, pushLatency, statusWrites, skippedStatusWrites, waveDelayedStatusWrites, crowdMemoryReturns)
}
