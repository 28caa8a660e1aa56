package reconcilers_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

const (
	waitTimeout = 90 * time.Second
	pollEvery   = 250 * time.Millisecond
)

func zapLevel() zapcore.Level {
	if os.Getenv("FLEET_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// world is one test's namespace with a Cluster, its EdgeCluster and a
// kubeconfig that points back at the test API server.
type world struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	cluster *clusterv1.Cluster
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ns, err := env.CreateNamespace(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, ctx: ctx, ns: ns}
}

// withCluster creates a Cluster, its EdgeCluster and the kubeconfig Secret.
func (w *world) withCluster(name string, endpoint infrav1.APIEndpoint) *world {
	w.t.Helper()
	w.cluster = &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: name,
			},
		},
	}
	w.must(env.Client.Create(w.ctx, w.cluster))
	// The kubeconfig must exist before the infrastructure is provisioned (so
	// before the EdgeCluster), or core tries to generate one from a CA these
	// tests do not make. It is owned by the Cluster, so it comes second.
	w.must(env.CreateKubeconfigSecret(w.ctx, w.cluster))
	w.must(env.Client.Create(w.ctx, &infrav1.EdgeCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec:       infrav1.EdgeClusterSpec{ControlPlaneEndpoint: endpoint},
	}))
	return w
}

func (w *world) must(err error) {
	w.t.Helper()
	if err != nil {
		w.t.Fatal(err)
	}
}

// host creates an EdgeHost as enrollment would, with the given labels.
func (w *world) host(name string, labels map[string]string) *infrav1.EdgeHost {
	w.t.Helper()
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labels}}
	w.must(env.Client.Create(w.ctx, h))
	return h
}

// bootstrapSecret creates a bootstrap data secret like CABPK's.
func (w *world) bootstrapSecret(name string, data map[string][]byte) {
	w.t.Helper()
	w.must(env.Client.Create(w.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: w.cluster.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: data,
	}))
}

func cloudConfig() map[string][]byte {
	return map[string][]byte{"value": []byte("## template: jinja\n#cloud-config\nruncmd: [\"true\"]\n"), "format": []byte("cloud-config")}
}

// machine creates a Machine and its EdgeMachine the way a user or a control
// plane would; Cluster API's webhooks add their defaults (the cluster-name
// label among them).
func (w *world) machine(name string, controlPlane bool, secret string, spec infrav1.EdgeMachineSpec, failureDomain string) *clusterv1.Machine {
	w.t.Helper()
	w.must(env.Client.Create(w.ctx, &infrav1.EdgeMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec:       spec,
	}))
	labels := map[string]string{}
	if controlPlane {
		labels[clusterv1.MachineControlPlaneLabel] = ""
	}
	m := &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labels},
		Spec: clusterv1.MachineSpec{
			ClusterName: w.cluster.Name,
			Version:     "v1.36.3",
			Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret)},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: name,
			},
			FailureDomain: failureDomain,
			Deletion:      clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
		},
	}
	w.must(env.Client.Create(w.ctx, m))
	return m
}

// machineDeployment creates an EdgeMachineTemplate and a MachineDeployment;
// Cluster API's webhook adds the cluster-name labels and the rolling-update
// defaults (maxSurge 1, maxUnavailable 0).
func (w *world) machineDeployment(name string, replicas int32, secret string, spec infrav1.EdgeMachineSpec) *clusterv1.MachineDeployment {
	w.t.Helper()
	w.must(env.Client.Create(w.ctx, &infrav1.EdgeMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec:       infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: spec}},
	}))
	sel := map[string]string{"fleet.test/md": name}
	tmplLabels := map[string]string{"fleet.test/md": name}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: w.cluster.Name,
			Replicas:    ptr.To(replicas),
			Selector:    metav1.LabelSelector{MatchLabels: sel},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: tmplLabels},
				Spec: clusterv1.MachineSpec{
					ClusterName: w.cluster.Name,
					Version:     "v1.36.3",
					Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To(secret)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: name,
					},
					Deletion: clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
				},
			},
		},
	}
	w.must(env.Client.Create(w.ctx, md))
	return md
}

// eventually polls cond until it returns nil, failing the test with the
// last error after waitTimeout. Tests wait on state, never on time.
func (w *world) eventually(what string, cond func() error) {
	w.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: still not true after %s: %v", what, waitTimeout, err)
		}
		select {
		case <-w.ctx.Done():
			w.t.Fatalf("%s: test context ended: %v", what, err)
		case <-time.After(pollEvery):
		}
	}
}

// consistently checks that cond stays nil for a while: used to show that
// something does NOT happen (a paused reconciler, a blocked deletion).
func (w *world) consistently(what string, d time.Duration, cond func() error) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := cond(); err != nil {
			w.t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(pollEvery)
	}
}

// reportHost writes into EdgeHost name's status what its agent would
// report, as fn sets it.
func (w *world) reportHost(name, what string, fn func(*infrav1.EdgeHostStatus)) {
	w.t.Helper()
	w.eventually(what, func() error {
		h := &infrav1.EdgeHost{}
		if err := w.get(name, h); err != nil {
			return err
		}
		fn(&h.Status)
		return env.Client.Status().Update(w.ctx, h)
	})
}

func (w *world) get(name string, obj client.Object) error {
	return env.Client.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, obj)
}

// fakeAgent writes into EdgeHost status what fleet-agent will report (it
// does not exist yet in this issue): on a claim it "provisions" the host,
// registering a Node with the host's providerID in the workload API server
// (the same test API server), and on a release it "resets" the host.
type fakeAgent struct {
	w *world
	// provision and reset switch the two halves on and off.
	provision, reset atomic.Bool
	// fail makes provisioning report a failure.
	fail atomic.Bool
	// certExpiry, when set, is reported as the host's certificate expiry.
	certExpiry atomic.Pointer[metav1.Time]

	mu     sync.Mutex
	resets map[string]int
}

func (w *world) startAgent() *fakeAgent {
	a := &fakeAgent{w: w, resets: map[string]int{}}
	a.provision.Store(true)
	a.reset.Store(true)
	go func() {
		for {
			select {
			case <-w.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				a.sync()
			}
		}
	}()
	return a
}

func providerID(ns, host string) string { return fmt.Sprintf("edge://%s/%s", ns, host) }

func (a *fakeAgent) sync() {
	ctx, w := a.w.ctx, a.w
	hosts := &infrav1.EdgeHostList{}
	if err := env.Client.List(ctx, hosts, client.InNamespace(w.ns)); err != nil {
		return
	}
	for i := range hosts.Items {
		h := &hosts.Items[i]
		switch claim := h.Spec.ClaimRef; {
		case claim != nil && a.provision.Load() && (h.Status.Provisioning == nil || h.Status.Provisioning.ClaimUID != claim.UID):
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + w.ns + "-" + h.Name},
				Spec: corev1.NodeSpec{ProviderID: providerID(w.ns, h.Name)}}
			if err := env.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
				continue
			}
			state := infrav1.ProvisioningSucceeded
			h.Status.Provisioning = &infrav1.HostProvisioningStatus{ClaimUID: claim.UID, State: state}
			if a.fail.Load() {
				h.Status.Provisioning.State = infrav1.ProvisioningFailed
				h.Status.Provisioning.Step = "runcmd 2/3"
				h.Status.Provisioning.Message = "kubeadm join: exit status 1"
			}
			h.Status.ProviderID = providerID(w.ns, h.Name)
			h.Status.NodeName = node.Name
			h.Status.Addresses = infrav1.MachineAddresses{
				{Type: infrav1.MachineInternalIP, Address: "10.0.0.1"},
				{Type: infrav1.MachineHostName, Address: h.Name},
			}
			h.Status.CertificatesExpiryDate = a.certExpiry.Load()
			h.Status.AgentObservedGeneration = h.Generation
			if conditions.Get(h, infrav1.AgentConnectedCondition) == nil {
				// What the gateway records on the agent's first session.
				conditions.Set(h, metav1.Condition{Type: infrav1.AgentConnectedCondition, Status: metav1.ConditionTrue, Reason: "Connected"})
			}
			_ = env.Client.Status().Update(ctx, h)
		case claim == nil && a.reset.Load() && hostphase.Phase(h) == infrav1.HostDeprovisioning:
			_ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-" + w.ns + "-" + h.Name}})
			h.Status.Provisioning = nil
			h.Status.ProviderID, h.Status.NodeName, h.Status.CertificatesExpiryDate = "", "", nil
			h.Status.AgentObservedGeneration = h.Generation
			if env.Client.Status().Update(ctx, h) == nil {
				a.mu.Lock()
				a.resets[h.Name]++
				a.mu.Unlock()
			}
		}
	}
}

func (a *fakeAgent) resetCount(host string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resets[host]
}

func condition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func objMeta(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
