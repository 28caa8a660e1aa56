package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	fleethub "github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

const (
	clusterName = "edge"
	waitTimeout = 4 * time.Minute
)

// hub and workload are shared by the tests of this package: Cluster API's
// managers can run only once per process (informer names are global).
// Each test works in its own namespace with its own hosts.
var hub, workload *testenv.Env

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: the e2e suite needs root (sandboxed agents); CI runs as root")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP: the e2e suite needs root for the agents' sandboxes")
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.Level(zapErrorLevel())))
	var err error
	if hub, err = testenv.Start(context.Background(), testenv.Options{KubeadmBootstrap: true, KubeadmControlPlane: true, NoHub: true}); err == nil {
		workload, err = testenv.Start(context.Background(), testenv.Options{APIServerOnly: true})
	}
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: starting the test environment: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = workload.Stop()
	_ = hub.Stop()
	os.Exit(code)
}

func newNamespace(t *testing.T) string { return hub.NewNamespace(t, "e2e") }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, waitTimeout, time.Second, what, cond)
}

func build(t *testing.T, dir, pkg, out string) string {
	t.Helper()
	bin := filepath.Join(dir, out)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// agentProc is one edge machine: a sandbox root and a fleet-agent process.
type agentProc struct {
	name string
	root string
	bin  string
	args []string
	cmd  *exec.Cmd
	log  *syncBuffer
	site *site
}

// syncBuffer collects a process's output safely across restarts.
type syncBuffer = testkit.SyncBuffer

func startAgent(t *testing.T, name, agentBin, simBin, hubURL, pin, token string, workloadKubeconfig []byte) *agentProc {
	t.Helper()
	return startAgentIn(t, nil, name, agentBin, simBin, hubURL, pin, token, workloadKubeconfig)
}

// startAgentIn starts an agent inside an edge site (nil: on this host).
func startAgentIn(t *testing.T, s *site, name, agentBin, simBin, hubURL, pin, token string, workloadKubeconfig []byte) *agentProc {
	t.Helper()
	return startAgentWith(t, s, name, agentBin, simBin, hubURL, pin, token, workloadKubeconfig)
}

// startAgentWith is startAgentIn with more arguments for the agent.
func startAgentWith(t *testing.T, s *site, name, agentBin, simBin, hubURL, pin, token string, workloadKubeconfig []byte, extra ...string) *agentProc {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"etc/hostname":             name + "\n",
		"etc/machine-id":           fmt.Sprintf("%032x", name)[:32] + "\n",
		"etc/os-release":           "PRETTY_NAME=\"fleet e2e sandbox\"\n",
		"etc/passwd":               "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                "root:x:0:\n",
		"etc/fleet-sim/kubeconfig": string(workloadKubeconfig),
	}
	for p, c := range files {
		must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(c), 0o644))
	}
	sim, err := os.ReadFile(simBin)
	must(t, err)
	must(t, os.MkdirAll(filepath.Join(root, "opt/fleet/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "opt/fleet/bin/kubeadm"), sim, 0o755))

	a := &agentProc{name: name, root: root, log: &syncBuffer{}, site: s}
	a.args = []string{"--config", filepath.Join(root, "no-config.yaml"),
		"--hub", hubURL, "--ca-cert-hash", pin, "--token", token,
		"--root-dir", root, "--state-dir", filepath.Join(root, "var/lib/fleet-agent"),
		"--sandbox", "--resync-interval", "2s"}
	a.args = append(a.args, extra...)
	a.bin = agentBin
	a.restart(t)
	t.Cleanup(func() { a.stop(t) })
	return a
}

// restart starts the agent process (again) on the same sandbox and state.
func (a *agentProc) restart(t *testing.T) {
	t.Helper()
	a.cmd = exec.Command(a.bin, a.args...)
	if a.site != nil {
		a.cmd = a.site.command(a.bin, a.args...)
	}
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	must(t, a.cmd.Start())
}

func (a *agentProc) stop(t *testing.T) {
	if a.cmd.Process == nil || a.cmd.ProcessState != nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
		t.Errorf("agent %s did not stop on SIGTERM", a.name)
	}
	if t.Failed() {
		t.Logf("--- agent %s log ---\n%s", a.name, tail(a.log.String(), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freeAddr(t *testing.T) string { return testkit.FreeAddr(t) }

func joinSpec() bootstrapv1.NodeRegistrationOptions {
	return bootstrapv1.NodeRegistrationOptions{
		Name:             "{{ ds.meta_data.local_hostname }}",
		KubeletExtraArgs: []bootstrapv1.Arg{{Name: "provider-id", Value: ptr.To("{{ ds.meta_data.provider_id }}")}},
	}
}

// A Cluster with a kubeadm control-plane Machine and a MachineDeployment of
// workers, all on EdgeMachines, runs on real agents: the Machines reach
// Running with nodeRef set by Cluster API itself, scale down resets a
// host, and deleting the Cluster gives every host back.
func TestClusterLifecycleOnRealAgents(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client

	gw, _ := startFleetHub(t, ns, freeAddr(t))
	hubURL := "https://" + gw.Addr()
	agentBin, simBin := buildBinaries(t)
	cluster, wkc := createCluster(t, ns)

	cpToken, wToken := roleTokens(t, ns)
	pin := gw.CA().Pin()
	agents := []*agentProc{
		startAgent(t, "cp-0", agentBin, simBin, hubURL, pin, cpToken, wkc),
		startAgent(t, "w-0", agentBin, simBin, hubURL, pin, wToken, wkc),
		startAgent(t, "w-1", agentBin, simBin, hubURL, pin, wToken, wkc),
	}
	eventually(t, "3 hosts enrolled and Available", func() error {
		hosts := &infrav1.EdgeHostList{}
		if err := c.List(ctx, hosts, client.InNamespace(ns)); err != nil {
			return err
		}
		n := 0
		for _, h := range hosts.Items {
			if h.Status.Phase == infrav1.HostAvailable {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d of %d hosts Available", n, len(hosts.Items))
		}
		return nil
	})

	// The control plane Machine, bootstrapped by CABPK.
	createCPMachine(t, c, ns, "cp-0", nil)
	// Workers: a MachineDeployment with a KubeadmConfigTemplate.
	must(t, c.Create(ctx, &bootstrapv1.KubeadmConfigTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
			Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: joinSpec()}}}}}))
	must(t, c.Create(ctx, &infrav1.EdgeMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: infrav1.EdgeMachineSpec{
			HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "worker"}}}}}}))
	mdLabels := map[string]string{"fleet.test/md": "workers", clusterv1.ClusterNameLabel: clusterName}
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns, Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: clusterName, Replicas: ptr.To[int32](2),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet.test/md": "workers"}},
			Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
				Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
				RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
					MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}}},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: mdLabels},
				Spec: clusterv1.MachineSpec{ClusterName: clusterName, Version: "v1.36.3",
					Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
						APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: "workers"}},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "workers"},
					Deletion:          clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
				},
			},
		},
	}
	must(t, c.Create(ctx, md))

	eventually(t, "3 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 3) })
	cp := &clusterv1.Machine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-0"}, cp))
	if cp.Spec.ProviderID != "edge://"+ns+"/cp-0" || cp.Status.NodeRef.Name != "cp-0" || len(cp.Status.Addresses) == 0 {
		t.Errorf("control-plane Machine: providerID %q nodeRef %q addresses %v", cp.Spec.ProviderID, cp.Status.NodeRef.Name, cp.Status.Addresses)
	}
	eventually(t, "certificate expiry on the control-plane Machine", func() error {
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp-0"}, cp))
		if cp.Status.CertificatesExpiryDate.IsZero() {
			return errors.New("no certificatesExpiryDate")
		}
		return nil
	})
	// The bootstrap really ran in the sandbox: CABPK's files and sentinel.
	for _, p := range []string{"run/cluster-api/bootstrap-success.complete", "etc/kubernetes/pki/ca.crt", "run/kubeadm/kubeadm.yaml"} {
		if _, err := os.Stat(filepath.Join(agents[0].root, p)); err != nil {
			t.Errorf("control-plane sandbox lacks %s: %v", p, err)
		}
	}

	// Scale down: one worker host is reset and Available again.
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers"}, md))
	patch := client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](1)
	must(t, c.Patch(ctx, md, patch))
	eventually(t, "one worker host back in the pool", func() error {
		if err := testenv.MachinesRunning(ctx, c, ns, 2); err != nil {
			return err
		}
		return testenv.HostsAvailable(ctx, c, ns, 1)
	})

	// Scale back up: the reset host is provisioned again.
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "workers"}, md))
	patch = client.MergeFrom(md.DeepCopy())
	md.Spec.Replicas = ptr.To[int32](2)
	must(t, c.Patch(ctx, md, patch))
	eventually(t, "3 Machines Running again after scale-up", func() error {
		if err := testenv.MachinesRunning(ctx, c, ns, 3); err != nil {
			return err
		}
		return testenv.HostsAvailable(ctx, c, ns, 0)
	})

	// Delete the Cluster: every host is reset and Available.
	must(t, c.Delete(ctx, cluster))
	eventually(t, "every host Available after the Cluster is gone", func() error {
		if err := testenv.HostsAvailable(ctx, c, ns, 3); err != nil {
			return err
		}
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(machines.Items) != 0 {
			return fmt.Errorf("%d machines left", len(machines.Items))
		}
		return nil
	})
	for _, a := range agents {
		if _, err := os.Stat(filepath.Join(a.root, "run/cluster-api/bootstrap-success.complete")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host %s still has a bootstrap sentinel after reset", a.name)
		}
	}
	nodes := &corev1.NodeList{}
	must(t, workload.Client.List(ctx, nodes))
	if len(nodes.Items) != 0 {
		t.Errorf("%d Nodes left in the workload cluster", len(nodes.Items))
	}
}

// startFleetHub runs fleet's hub (reconcilers and gateway) on addr and
// returns a function that stops it, as a hub restart would.
func startFleetHub(t *testing.T, ns, addr string) (*gateway.Server, func()) {
	t.Helper()
	return startFleetHubWith(t, gateway.Options{Addr: addr, HubNamespace: ns})
}

// startFleetHubWith is startFleetHub with gateway options o (its address,
// hub namespace and more).
func startFleetHubWith(t *testing.T, o gateway.Options) (*gateway.Server, func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(hub.Config, ctrl.Options{Scheme: hub.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, Logger: logr.Discard()})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	o.IPs = []net.IP{net.ParseIP("127.0.0.1")}
	h, err := fleethub.Setup(ctx, mgr, fleethub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 4, SkipNameValidation: true},
		Gateway: &o})
	must(t, err)
	gw := h.Gateway
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	<-gw.Ready()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return gw, stop
}

// roleTokens makes one enrollment token for control-plane hosts and one
// for workers: their hosts are labelled role=cp and role=worker, which
// createMachine's EdgeMachines select.
func roleTokens(t *testing.T, ns string) (cp, worker string) {
	t.Helper()
	tokens := make([]string, 2)
	for i, role := range []string{"cp", "worker"} {
		tok, _, err := enrollment.CreateToken(context.Background(), hub.Client, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns,
			HostLabels: map[string]string{"role": role}}, time.Now())
		must(t, err)
		tokens[i] = tok
	}
	return tokens[0], tokens[1]
}

func buildBinaries(t *testing.T) (agentBin, simBin string) {
	t.Helper()
	dir := t.TempDir()
	return build(t, dir, "./cmd/fleet-agent", "fleet-agent"), build(t, dir, "./test/nodesim", "kubeadm")
}

// createCluster makes the Cluster, its EdgeCluster and a kubeconfig that
// points at the workload API server; it returns that kubeconfig.
func createCluster(t *testing.T, ns string) (*clusterv1.Cluster, []byte) {
	t.Helper()
	ctx, c := context.Background(), hub.Client
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: clusterName}},
	}
	must(t, c.Create(ctx, cluster))
	wkc := kubeconfig.FromEnvTestConfig(workload.Config, cluster)
	must(t, c.Create(ctx, kubeconfig.GenerateSecret(cluster, wkc)))
	must(t, c.Create(ctx, &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "edge.fleet.internal", Port: 6443}}}))
	return cluster, wkc
}

// createCPMachine makes a control-plane Machine bootstrapped by a
// KubeadmConfig (init) with the given commands before kubeadm.
func createCPMachine(t *testing.T, c client.Client, ns, name string, pre []string) {
	t.Helper()
	createMachine(t, c, ns, name, "cp", bootstrapv1.KubeadmConfigSpec{
		InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: joinSpec()}, PreKubeadmCommands: pre})
}

// createWorkerMachine makes a worker Machine bootstrapped by a
// KubeadmConfig (join) with the given commands before kubeadm.
func createWorkerMachine(t *testing.T, c client.Client, ns, name string, pre []string) {
	t.Helper()
	createMachine(t, c, ns, name, "worker", bootstrapv1.KubeadmConfigSpec{
		JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: joinSpec()}, PreKubeadmCommands: pre})
}

// createMachine writes a Machine, its KubeadmConfig and its EdgeMachine
// (which picks hosts labelled role=<role>).
func createMachine(t *testing.T, c client.Client, ns, name, role string, spec bootstrapv1.KubeadmConfigSpec) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	must(t, c.Create(ctx, &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: spec}))
	must(t, c.Create(ctx, &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}}}))
	machineLabels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	if role == "cp" {
		machineLabels[clusterv1.MachineControlPlaneLabel] = ""
	}
	must(t, c.Create(ctx, &clusterv1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: machineLabels},
		Spec: clusterv1.MachineSpec{ClusterName: clusterName, Version: "v1.36.3",
			Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
				APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}},
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: name},
			Deletion:          clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
		},
	}))
}
