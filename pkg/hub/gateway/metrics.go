package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleet_gateway_handshakes_total",
	Help: "Session handshakes by result (ok, no_certificate, revoked, replaced, unknown_host, host_busy, busy, upgrade_failed, bad_hello, unsupported_agent: no protocol version in common).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(handshakes)
}
