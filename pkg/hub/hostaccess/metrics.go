package hostaccess

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_host_access_requests_total",
		Help: "Host-access API requests (kubectl fleet host logs|facts) by subresource and HTTP status code.",
	}, []string{"subresource", "code"})
	logBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleet_host_access_log_bytes_total",
		Help: "Bytes of host logs carried from agents to operators.",
	})
)

func init() {
	metrics.Registry.MustRegister(requests, logBytes)
}
