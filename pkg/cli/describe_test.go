package cli_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/describe"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

var fixedNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fleetOf writes a paused cluster (so no controller changes what the test
// set) with one control-plane machine and workers in a MachineDeployment,
// each on a host whose agent state the test fixes.
func fleetOf(t *testing.T, ns string, workers int) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	lbl := map[string]string{clusterv1.ClusterNameLabel: "store"}
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns, Labels: lbl},
		Spec: clusterv1.ClusterSpec{Paused: ptr.To(true), InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "store"}}}
	must(c.Create(ctx, cl))
	must(setStatus(cl, func() {
		cl.Status.Phase = "Provisioned"
		cl.Status.Conditions = []metav1.Condition{{Type: clusterv1.AvailableCondition, Status: "False", Reason: "NotAvailable",
			Message: "1 of 3 machines is not ready", LastTransitionTime: metav1.NewTime(fixedNow)}}
	}))
	must(c.Create(ctx, &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: "store", Namespace: ns, Labels: lbl},
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "store.edge.internal", Port: 6443}}}))
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "store-md-0", Namespace: ns, Labels: lbl},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "store", Replicas: ptr.To(int32(workers)),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"md": "0"}},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"md": "0"}},
				Spec: clusterv1.MachineSpec{ClusterName: "store", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "t"}}}}}
	must(c.Create(ctx, md))
	must(setStatus(md, func() { md.Status.ReadyReplicas = ptr.To(int32(workers - 1)) }))
	machine := func(name string, cp bool, i int) {
		labels := map[string]string{clusterv1.ClusterNameLabel: "store"}
		if cp {
			labels[clusterv1.MachineControlPlaneLabel] = ""
		} else {
			labels[clusterv1.MachineDeploymentNameLabel] = "store-md-0"
		}
		host := fmt.Sprintf("host-%02d", i)
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: host, Namespace: ns}}
		must(c.Create(ctx, h))
		seen := metav1.NewTime(fixedNow.Add(-3 * time.Minute))
		status := "True"
		if i == 2 {
			status = "False"
		}
		must(setStatus(h, func() {
			h.Status.LastSeenTime = &seen
			h.Status.Conditions = append(h.Status.Conditions, metav1.Condition{Type: infrav1.AgentConnectedCondition,
				Status: metav1.ConditionStatus(status), Reason: "x", LastTransitionTime: seen})
		}))
		em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl}}
		must(c.Create(ctx, em))
		must(setStatus(em, func() {
			em.Status.HostRef = host
			if cp {
				exp := metav1.NewTime(fixedNow.Add(20 * 24 * time.Hour))
				em.Status.CertificatesExpiryDate = &exp
			}
			if i == 2 {
				em.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "False", Reason: "ProvisioningFailed",
					Message: "Agent on EdgeHost host-02 failed the bootstrap at runcmd 2/3: exit status 1", LastTransitionTime: seen}}
			}
		}))
		m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: clusterv1.MachineSpec{ClusterName: "store", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
				ProviderID:        fmt.Sprintf("edge://%s/%s", ns, host),
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: name}}}
		must(c.Create(ctx, m))
		must(setStatus(m, func() {
			ready := "True"
			if i == 2 {
				ready = "False"
				m.Status.Phase = "Provisioning"
			} else {
				m.Status.Phase = "Running"
				m.Status.NodeRef = clusterv1.MachineNodeReference{Name: host}
				m.Status.Addresses = clusterv1.MachineAddresses{{Type: clusterv1.MachineInternalIP, Address: fmt.Sprintf("10.0.0.%d", i)}}
			}
			m.Status.Conditions = []metav1.Condition{{Type: clusterv1.ReadyCondition, Status: metav1.ConditionStatus(ready), Reason: "x", LastTransitionTime: seen}}
		}))
	}
	machine("store-cp-0", true, 1)
	for i := 0; i < workers; i++ {
		machine(fmt.Sprintf("store-md-0-w%02d", i), false, i+2)
	}
}

func TestDescribeGolden(t *testing.T) {
	ns := "describe-golden"
	fleetOf(t, ns, 2)
	conn, err := kube.NewConnection(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := describe.Build(context.Background(), conn.Client, ns, "store", fixedNow)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := describe.WriteTree(&out, tree, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "describe-cluster.txt")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./pkg/cli -run DescribeGolden -update)", err)
	}
	if out.String() != string(want) {
		t.Errorf("describe output changed:\n%s\nwant:\n%s", out.String(), want)
	}
	// The command itself, as JSON.
	jsonOut, _, err := fleet(t, "describe", "cluster", "store", "-n", ns, "-o", "json")
	if err != nil || !bytes.Contains([]byte(jsonOut), []byte(`"agentConnected": "False"`)) {
		t.Errorf("describe -o json: %v\n%s", err, jsonOut)
	}
	if _, _, err := fleet(t, "describe", "cluster", "nope", "-n", ns); err == nil || !bytes.Contains([]byte(err.Error()), []byte("not found")) {
		t.Errorf("unknown cluster: %v", err)
	}
}

type countingRT struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// describe makes the same number of API requests for 3 machines as for 40:
// no request per machine.
func TestDescribeRequestsAreBounded(t *testing.T) {
	count := func(ns string, workers int) int64 {
		fleetOf(t, ns, workers)
		var n atomic.Int64
		cfg := rest.CopyConfig(env.Config)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingRT{rt: rt, n: &n} })
		conn, err := kube.NewConnection(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := conn.Client
		n.Store(0)
		if _, err := describe.Build(context.Background(), c, ns, "store", fixedNow); err != nil {
			t.Fatal(err)
		}
		return n.Load()
	}
	small, large := count("describe-small", 2), count("describe-large", 39)
	if small != large || large > 8 {
		t.Errorf("requests: %d for 3 machines, %d for 40", small, large)
	}
}

// setStatus re-reads obj, applies mutate and writes the status, retrying
// when a controller changed the object meanwhile.
func setStatus(obj client.Object, mutate func()) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return env.Client.Status().Update(context.Background(), obj)
	})
}

// setSpec changes obj's spec, retrying on conflict: Cluster API's
// reconcilers write the same objects while the test runs.
func setSpec(obj client.Object, mutate func()) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return env.Client.Update(context.Background(), obj)
	})
}

func TestDescribeShowConditionsAndYAML(t *testing.T) {
	ns := "describe-conditions"
	fleetOf(t, ns, 1)
	out, _, err := fleet(t, "describe", "cluster", "store", "-n", ns, "--show-conditions")
	if err != nil || !strings.Contains(out, "Available=False") || !strings.Contains(out, "1 of 3 machines is not ready") {
		t.Errorf("--show-conditions: %v\n%s", err, out)
	}
	out, _, err = fleet(t, "describe", "cluster", "store", "-n", ns, "-o", "yaml")
	if err != nil || !strings.Contains(out, "kind: Cluster") || !strings.Contains(out, "host: host-01") {
		t.Errorf("-o yaml: %v\n%s", err, out)
	}
}

// A one-machine KubeadmControlPlane whose Machine a MachineHealthCheck
// found unhealthy is never remediated; Cluster API says why only in the
// Machine's OwnerRemediated condition, and describe shows it on the
// Machine and the control plane (the conditions are the ones the real
// MachineHealthCheck and KCP reconcilers write: TestRealNodesRemediation).
func TestDescribeSaysWhyNotRemediated(t *testing.T) {
	ctx := context.Background()
	ns := "describe-not-remediated"
	fleetOf(t, ns, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	lbl := map[string]string{clusterv1.ClusterNameLabel: "store"}
	must(env.Client.Create(ctx, &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Name: "store-control-plane", Namespace: ns, Labels: lbl},
		Spec: controlplanev1.KubeadmControlPlaneSpec{Replicas: ptr.To(int32(1)), Version: "v1.36.3",
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "t"}}}}}))
	cl := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store"}}
	must(setSpec(cl, func() {
		cl.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{APIGroup: controlplanev1.GroupVersion.Group,
			Kind: "KubeadmControlPlane", Name: "store-control-plane"}
	}))
	m := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "store-cp-0"}}
	must(setStatus(m, func() {
		now := metav1.NewTime(fixedNow)
		m.Status.Conditions = append(m.Status.Conditions,
			metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse,
				Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason, LastTransitionTime: now,
				Message: "Health check failed:\n  * Condition Ready on Node is reporting status Unknown with reason NodeStatusUnknown for more than 20s"},
			metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse,
				Reason: controlplanev1.KubeadmControlPlaneMachineCannotBeRemediatedReason, LastTransitionTime: now,
				Message: "KubeadmControlPlane can't remediate if current replicas are less or equal to 1"})
	}))
	out, _, err := fleet(t, "describe", "cluster", "store", "-n", ns)
	must(err)
	for _, want := range []string{
		"KubeadmControlPlane/store-control-plane", "1 machine: Machine store-cp-0 unhealthy, not remediated: KubeadmControlPlane can't remediate if current replicas are less or equal to 1",
		"unhealthy: Condition Ready on Node is reporting status Unknown with reason NodeStatusUnknown for more than 20s; not remediated: KubeadmControlPlane can't remediate",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	out, _, err = fleet(t, "describe", "cluster", "store", "-n", ns, "-o", "json")
	if err != nil || !strings.Contains(out, `"health": "unhealthy: Condition Ready on Node`) {
		t.Errorf("describe -o json: %v\n%s", err, out)
	}
}
