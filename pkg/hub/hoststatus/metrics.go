package hoststatus

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	statusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_total",
		Help: "EdgeHost status writes by cause (report, connected, disconnected, last_seen).",
	}, []string{"cause"})
	waveDelayedStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_wave_delayed_total",
		Help: "EdgeHost status writes held back (counted as they start to wait) while a wave of connections queued for TLS handshake places (see --wave-status-delay), by cause (connected, last_seen).",
	}, []string{"cause"})
	skippedStatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_status_writes_skipped_total",
		Help: "EdgeHost status writes found unnecessary by cause (connected: a reconnect to a host that already reads as connected to this replica; disconnected: an agent back within the disconnect grace; superseded: a report of a session a newer one of the same host replaced).",
	}, []string{"cause"})
)

func init() {
	metrics.Registry.MustRegister(statusWrites, waveDelayedStatusWrites, skippedStatusWrites)
}
