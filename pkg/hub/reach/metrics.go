package reach

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	tunnelsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_reach_tunnels_open",
		Help: "Edge-reach tunnels open through this hub replica.",
	})
	tunnelsTotal = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleet_reach_tunnels_total",
		Help: "Edge-reach tunnels established.",
	})
	tunnelBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_reach_tunnel_bytes_total",
		Help: "Bytes carried by edge-reach tunnels, by direction (to_edge, from_edge).",
	}, []string{"direction"})
	refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_reach_refused_total",
		Help: "Proxy requests refused before any dial, by reason (not_connect, unauthenticated, bad_credentials, target_not_allowed, edge_reach_disabled, limit).",
	}, []string{"reason"})
	dialFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_reach_dial_failures_total",
		Help: "Tunnels that could not be opened, by reason (no_agent, agent_refused, agent_busy, dial_failed, session_error).",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(tunnelsOpen, tunnelsTotal, tunnelBytes, refused, dialFailures)
}
