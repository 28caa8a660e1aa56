package enrollment

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var enrollments = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fleet_gateway_enrollments_total",
	Help: "Enrollment attempts by result (ok, malformed, unknown, expired, used_up, revoked, rate_limited, busy, bad_request, error).",
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(enrollments)
}
