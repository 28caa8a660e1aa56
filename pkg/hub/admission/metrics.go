package admission

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	tlsHandshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_gateway_tls_handshakes_total",
		Help: "TLS handshakes on the gateway by result (ok, failed, busy: no place among --max-concurrent-tls-handshakes in time, the connection was closed).",
	}, []string{"result"})
	crowdMemoryReturns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleet_gateway_crowd_memory_returns_total",
		Help: "Connection waves (TLS handshakes queued for a place) after which the hub returned its free memory to the operating system.",
	})
)

func init() {
	metrics.Registry.MustRegister(tlsHandshakes, crowdMemoryReturns)
}
