package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

const metricsNS = "stores"

// writeFleet writes a small fleet whose metrics are known: a clean host; a
// host serving Machine w0 whose agent has been gone 20 minutes; a host
// whose reset failed; a cluster whose certificates expire in 20 and 40
// days; Machine w0 marked for remediation. No Cluster API controller runs
// here, so nothing changes what is written.
func writeFleet(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	status := func(obj client.Object, mutate func()) {
		t.Helper()
		// The hub's reconcilers write these objects too.
		must(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			mutate()
			return c.Status().Update(ctx, obj)
		}))
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metricsNS}}))
	now := time.Now()
	lbl := map[string]string{clusterv1.ClusterNameLabel: "store"}
	for _, name := range []string{"w0", "cp0"} {
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metricsNS, Labels: lbl},
			Spec: clusterv1.MachineSpec{ClusterName: "store", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: name}}}
		must(c.Create(ctx, m))
		if name == "w0" {
			status(m, func() {
				m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
					Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason, LastTransitionTime: metav1.Now()}}
			})
		}
		em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metricsNS, Labels: lbl}}
		must(c.Create(ctx, em))
		days := map[string]int{"w0": 20, "cp0": 40}[name]
		status(em, func() {
			exp := metav1.NewTime(now.Add(time.Duration(days) * 24 * time.Hour))
			em.Status.CertificatesExpiryDate = &exp
		})
	}
	em := &infrav1.EdgeMachine{}
	must(c.Get(ctx, client.ObjectKey{Namespace: metricsNS, Name: "w0"}, em))
	host := func(name string, claim *infrav1.HostClaimReference, p *infrav1.HostProvisioningStatus, connected metav1.ConditionStatus, seen time.Time, more ...metav1.Condition) {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metricsNS}, Spec: infrav1.EdgeHostSpec{ClaimRef: claim}}
		must(c.Create(ctx, h))
		if connected == "" {
			return
		}
		status(h, func() {
			h.Status.Provisioning = p
			h.Status.LastSeenTime = ptr.To(metav1.NewTime(seen))
			h.Status.Conditions = append([]metav1.Condition{{Type: infrav1.AgentConnectedCondition, Status: connected, Reason: "x",
				LastTransitionTime: metav1.NewTime(seen)}}, more...)
		})
	}
	host("clean-1", nil, nil, "", now)
	host("gone-1", &infrav1.HostClaimReference{Name: "w0", UID: em.UID},
		&infrav1.HostProvisioningStatus{ClaimUID: em.UID, State: infrav1.ProvisioningSucceeded}, metav1.ConditionFalse, now.Add(-20*time.Minute),
		metav1.Condition{Type: infrav1.AgentVersionUnsupportedCondition, Status: metav1.ConditionTrue, Reason: infrav1.AgentTooOldReason,
			Message: "x", LastTransitionTime: metav1.NewTime(now)})
	host("stuck-1", nil, &infrav1.HostProvisioningStatus{ClaimUID: "old", State: infrav1.ProvisioningResetFailed}, metav1.ConditionTrue, now)
}

// fleetMetricsMatch checks the scrape against writeFleet's objects.
func fleetMetricsMatch(body string) error {
	families, err := parseMetrics(body)
	if err != nil {
		return err
	}
	value := func(name string, labels map[string]string) (float64, error) {
		f := families[name]
		if f == nil {
			return 0, fmt.Errorf("no metric %s", name)
		}
	next:
		for _, m := range f.GetMetric() {
			for k, v := range labels {
				if labelOf(m, k) != v {
					continue next
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), nil
			}
			return m.GetCounter().GetValue(), nil
		}
		return 0, fmt.Errorf("no %s%v", name, labels)
	}
	with := func(k, v string) map[string]string { return map[string]string{"namespace": metricsNS, k: v} }
	exact := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"fleet_edgehosts", with("phase", "Available"), 1},
		{"fleet_edgehosts", with("phase", "Provisioned"), 1},
		{"fleet_edgehosts", with("phase", "NeedsAttention"), 1},
		{"fleet_edgehosts", with("phase", "Claimed"), 0},
		{"fleet_edgehosts_connected", with("connected", "true"), 1},
		{"fleet_edgehosts_connected", with("connected", "false"), 1},
		{"fleet_edgehosts_connected", with("connected", "unknown"), 1},
		{"fleet_edgehosts_agent_unsupported", map[string]string{"namespace": metricsNS}, 1},
		{"fleet_machines_remediating", with("cluster", "store"), 1},
		{"fleet_machine_remediations_total", with("cluster", "store"), 1},
	}
	for _, e := range exact {
		got, err := value(e.name, e.labels)
		if err != nil {
			return err
		}
		if got != e.want {
			return fmt.Errorf("%s%v = %v, want %v", e.name, e.labels, got, e.want)
		}
	}
	if got, err := value("fleet_cluster_certificates_expiry_days", with("cluster", "store")); err != nil || got > 20 || got < 19.9 {
		return fmt.Errorf("certificate expiry of cluster store: %v days, %v (want the earlier, 20)", got, err)
	}
	gone, err := value("fleet_edgehost_disconnected_seconds", map[string]string{"namespace": metricsNS, "edgehost": "gone-1", "claimed": "true"})
	if err != nil || gone < 20*60 || gone > 60*60 {
		return fmt.Errorf("gone-1 disconnected for %v s, %v (want about 1200)", gone, err)
	}
	if _, err := value("fleet_edgehost_disconnected_seconds", map[string]string{"namespace": metricsNS, "edgehost": "stuck-1"}); err == nil {
		return fmt.Errorf("a connected host has a disconnected time")
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// monitoringRule is the part of a PrometheusRule the checks read; unknown
// fields are an error, so a typo in the manifest fails here.
type monitoringRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

var metricRE = regexp.MustCompile(`\bfleet_[a-z_]+\b`)

// monitoringMetrics parses manifests/monitoring and returns every fleet
// metric its alerts and dashboard name.
func monitoringMetrics(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join("..", "..", "manifests", "monitoring")
	b, err := os.ReadFile(filepath.Join(dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule monitoringRule
	if err := yaml.UnmarshalStrict(b, &rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("prometheusrule.yaml is %s %s with %d groups", rule.APIVersion, rule.Kind, len(rule.Spec.Groups))
	}
	names := map[string]bool{}
	alerts := map[string]bool{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %q lacks an expr, a severity, a summary or a description", r.Alert)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("alert %s: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			alerts[r.Alert] = true
			for _, m := range metricRE.FindAllString(r.Expr, -1) {
				names[m] = true
			}
		}
	}
	for _, a := range []string{"FleetHostNeedsAttention", "FleetAgentGone", "FleetAgentVersionUnsupported", "FleetCertificatesExpireIn30Days", "FleetCertificatesExpireIn7Days", "FleetMachinesRemediated"} {
		if !alerts[a] {
			t.Errorf("prometheusrule.yaml has no alert %s", a)
		}
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &dash); err != nil || dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatalf("grafana-dashboard.json: %v (title %q, %d panels)", err, dash.Title, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				names[m] = true
			}
		}
	}
	var out []string
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Every metric the alerts and the dashboard use is one the hub exports.
func checkMonitoringUsesExportedMetrics(t *testing.T, body string) {
	t.Helper()
	families, err := parseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	used := monitoringMetrics(t)
	if len(used) < 5 {
		t.Fatalf("the monitoring manifests name only %v", used)
	}
	for _, m := range used {
		base := m
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if f := strings.TrimSuffix(m, suffix); f != m && families[f] != nil && families[f].GetType() == dto.MetricType_HISTOGRAM {
				base = f
			}
		}
		if families[base] == nil {
			t.Errorf("manifests/monitoring uses %s, which the hub does not export", m)
		}
	}
}

func parseMetrics(body string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(body))
}
