package delivery

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	transferBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fleet_release_transfer_bytes_total",
		Help: "Bytes of agent release binaries and Kubernetes archives sent to agents by this hub replica.",
	})
	transfers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_release_transfers_total",
		Help: "Transfers of agent releases and Kubernetes archives to agents, by result (complete, cut, refused, source_failed).",
	}, []string{"result"})
	transfersActive = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fleet_release_transfers_active",
		Help: "Transfers under way or waiting for a place on this hub replica.",
	})
	sourceFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleet_release_source_fetches_total",
		Help: "Fetches of release binaries and Kubernetes archives from their url into the hub's cache, by result (ok, failed).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(transferBytes, transfers, transfersActive, sourceFetches)
}
