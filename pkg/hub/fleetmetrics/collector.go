package fleetmetrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// The metric names; manifests/monitoring's alerts and dashboard use them.
const (
	HostsName             = "fleet_edgehosts"
	HostsConnectedName    = "fleet_edgehosts_connected"
	HostDisconnectedName  = "fleet_edgehost_disconnected_seconds"
	CertificateExpiryName = "fleet_cluster_certificates_expiry_days"
	RemediatingName       = "fleet_machines_remediating"
	RemediationsName      = "fleet_machine_remediations_total"
	UnsupportedName       = "fleet_edgehosts_agent_unsupported"
)

var (
	hostsDesc = prometheus.NewDesc(HostsName,
		"EdgeHosts by phase.", []string{"namespace", "phase"}, nil)
	connectedDesc = prometheus.NewDesc(HostsConnectedName,
		"EdgeHosts by agent connectivity (the AgentConnected condition: true, false or unknown).", []string{"namespace", "connected"}, nil)
	disconnectedDesc = prometheus.NewDesc(HostDisconnectedName,
		"Seconds since the hub last heard from the agent of each EdgeHost whose agent is not connected; claimed tells whether the host serves a Machine.",
		[]string{"namespace", "edgehost", "claimed"}, nil)
	expiryDesc = prometheus.NewDesc(CertificateExpiryName,
		"Days until the earliest certificate expiry reported by the agents of a cluster's EdgeMachines (negative once expired).",
		[]string{"namespace", "cluster"}, nil)
	remediatingDesc = prometheus.NewDesc(RemediatingName,
		"Machines that a MachineHealthCheck marked for remediation (condition OwnerRemediated present) and that are not yet replaced.",
		[]string{"namespace", "cluster"}, nil)
	unsupportedDesc = prometheus.NewDesc(UnsupportedName,
		"EdgeHosts whose agent the hub refuses for sharing no protocol version with it (the AgentVersionUnsupported condition True).",
		[]string{"namespace"}, nil)
	remediationsDesc = prometheus.NewDesc(RemediationsName,
		"Machines this hub replica saw marked for remediation since it started.",
		[]string{"namespace", "cluster"}, nil)
)

var phases = []infrav1.EdgeHostPhase{infrav1.HostAvailable, infrav1.HostClaimed, infrav1.HostProvisioning,
	infrav1.HostProvisioned, infrav1.HostDeprovisioning, infrav1.HostNeedsAttention}

// Collector computes the fleet's gauges from a cache at scrape time.
type Collector struct {
	// Reader is the manager's cache.
	Reader client.Reader
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu sync.Mutex
	// seen are the Machines seen marked for remediation, by uid, with
	// their namespace/cluster, so each counts once; remediations are the
	// counts.
	seen         map[types.UID]key
	remediations map[key]float64
}

type key struct{ namespace, cluster string }

// registerMu makes Register's replacement one step for managers set up
// side by side.
var registerMu sync.Mutex

// Register adds a Collector reading from r to controller-runtime's
// registry, which the manager's metrics endpoint serves. It replaces the
// Collector of an earlier manager in the same process (tests run several).
func Register(r client.Reader) error {
	registerMu.Lock()
	defer registerMu.Unlock()
	metrics.Registry.Unregister(&Collector{})
	if err := metrics.Registry.Register(&Collector{Reader: r}); err != nil {
		return fmt.Errorf("registering the fleet's metrics: %w", err)
	}
	return nil
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{hostsDesc, connectedDesc, disconnectedDesc, unsupportedDesc, expiryDesc, remediatingDesc, remediationsDesc} {
		ch <- d
	}
}

// Collect lists hosts, EdgeMachines and Machines from the cache. A list
// that fails leaves its metrics out of this scrape (Prometheus then shows
// a gap, not a wrong zero).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	hosts := &infrav1.EdgeHostList{}
	if err := c.Reader.List(ctx, hosts); err == nil {
		collectHosts(ch, hosts.Items, now)
	}
	ems := &infrav1.EdgeMachineList{}
	if err := c.Reader.List(ctx, ems); err == nil {
		collectExpiry(ch, ems.Items, now)
	}
	machines := &clusterv1.MachineList{}
	if err := c.Reader.List(ctx, machines); err == nil {
		c.collectRemediations(ch, machines.Items)
	}
}

func collectHosts(ch chan<- prometheus.Metric, hosts []infrav1.EdgeHost, now time.Time) {
	byPhase := map[string]map[infrav1.EdgeHostPhase]float64{}
	byConn := map[string]map[string]float64{}
	unsupported := map[string]float64{}
	for i := range hosts {
		h := &hosts[i]
		if byPhase[h.Namespace] == nil {
			byPhase[h.Namespace] = map[infrav1.EdgeHostPhase]float64{}
			byConn[h.Namespace] = map[string]float64{"true": 0, "false": 0, "unknown": 0}
		}
		byPhase[h.Namespace][hostphase.Phase(h)]++
		connected := "unknown"
		switch cond := conditions.Get(h, infrav1.AgentConnectedCondition); {
		case cond == nil:
		case cond.Status == metav1.ConditionTrue:
			connected = "true"
		case cond.Status == metav1.ConditionFalse:
			connected = "false"
		}
		byConn[h.Namespace][connected]++
		if conditions.IsTrue(h, infrav1.AgentVersionUnsupportedCondition) {
			unsupported[h.Namespace]++
		}
		if connected != "true" {
			ch <- prometheus.MustNewConstMetric(disconnectedDesc, prometheus.GaugeValue, disconnectedFor(h, now).Seconds(),
				h.Namespace, h.Name, boolString(h.Spec.ClaimRef != nil))
		}
	}
	for ns, counts := range byPhase {
		// Every phase, zeros too: an alert on NeedsAttention resolves
		// when its series drops to 0 rather than vanishing.
		for _, p := range phases {
			ch <- prometheus.MustNewConstMetric(hostsDesc, prometheus.GaugeValue, counts[p], ns, string(p))
		}
		for conn, n := range byConn[ns] {
			ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, n, ns, conn)
		}
		ch <- prometheus.MustNewConstMetric(unsupportedDesc, prometheus.GaugeValue, unsupported[ns], ns)
	}
}

// disconnectedFor is the time since the hub last heard from the agent: its
// lastSeenTime, else when AgentConnected last changed, else the host's
// creation (an agent that never connected).
func disconnectedFor(h *infrav1.EdgeHost, now time.Time) time.Duration {
	since := h.CreationTimestamp.Time
	if cond := conditions.Get(h, infrav1.AgentConnectedCondition); cond != nil && !cond.LastTransitionTime.IsZero() {
		since = cond.LastTransitionTime.Time
	}
	if h.Status.LastSeenTime != nil && h.Status.LastSeenTime.After(since) {
		since = h.Status.LastSeenTime.Time
	}
	return max(now.Sub(since), 0)
}

func collectExpiry(ch chan<- prometheus.Metric, ems []infrav1.EdgeMachine, now time.Time) {
	earliest := map[key]time.Time{}
	for _, em := range ems {
		cluster := em.Labels[clusterv1.ClusterNameLabel]
		if cluster == "" || em.Status.CertificatesExpiryDate == nil {
			continue
		}
		k := key{em.Namespace, cluster}
		if t, ok := earliest[k]; !ok || em.Status.CertificatesExpiryDate.Before(&metav1.Time{Time: t}) {
			earliest[k] = em.Status.CertificatesExpiryDate.Time
		}
	}
	for k, t := range earliest {
		ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, t.Sub(now).Hours()/24, k.namespace, k.cluster)
	}
}

func (c *Collector) collectRemediations(ch chan<- prometheus.Metric, machines []clusterv1.Machine) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.remediations = map[types.UID]key{}, map[key]float64{}
	}
	current := map[key]float64{}
	present := map[types.UID]bool{}
	for i := range machines {
		m := &machines[i]
		k := key{m.Namespace, m.Spec.ClusterName}
		if _, ok := current[k]; !ok {
			current[k] = 0
		}
		if conditions.Get(m, clusterv1.MachineOwnerRemediatedCondition) == nil {
			continue
		}
		current[k]++
		present[m.UID] = true
		if _, counted := c.seen[m.UID]; !counted {
			c.seen[m.UID] = k
			c.remediations[k]++
		}
	}
	// Forget replaced Machines (each is counted already), so the set
	// stays as small as the number of Machines under remediation.
	for uid := range c.seen {
		if !present[uid] {
			delete(c.seen, uid)
		}
	}
	for k, n := range current {
		ch <- prometheus.MustNewConstMetric(remediatingDesc, prometheus.GaugeValue, n, k.namespace, k.cluster)
	}
	for k, n := range c.remediations {
		ch <- prometheus.MustNewConstMetric(remediationsDesc, prometheus.CounterValue, n, k.namespace, k.cluster)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
