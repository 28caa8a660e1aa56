package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/agent/hostclock"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	fleethub "github.com/edgefleet/fleet/pkg/hub"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
	hubreconcilers "github.com/edgefleet/fleet/pkg/hub/reconcilers"
)

const clusterName = "faults"

// historyFile is where, in a host's root, the bootstrap and the reset of
// the suite's Machines append what they ran: the agent's own record.
const historyFile = "/var/lib/fleet-faults/history"

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// startHub runs fleet's hub for ns with timeouts compressed: agents ping
// every 2 s, and a session silent for 8 s is closed; tune changes more.
func startHub(t *testing.T, ns string, tune ...func(*gateway.Options)) *gateway.Server {
	t.Helper()
	mgr, err := ctrl.NewManager(hub.Config, ctrl.Options{Scheme: hub.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Logger: logr.Discard(), Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	gw := &gateway.Options{Addr: "127.0.0.1:0", HubNamespace: ns, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeepAlive: 2 * time.Second, DisconnectGrace: -1, LastSeenInterval: 10 * time.Second}
	for _, f := range tune {
		f(gw)
	}
	h, err := fleethub.Setup(ctx, mgr, fleethub.Options{Reconcilers: hubreconcilers.Options{Concurrency: 4, SkipNameValidation: true}, Gateway: gw})
	must(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	<-h.Gateway.Ready()
	t.Cleanup(func() { cancel(); <-done })
	return h.Gateway
}

// siteOnHub starts a run with the hub in this process (startHub, with
// tune) and a site of four hosts (startAgents, named prefix…) whose
// router leads straight to it; each bootstrap of the run pauses as its
// hosts' resets.
func siteOnHub(t *testing.T, prefix string, opts hostOptions, tune ...func(*gateway.Options)) (*run, []*agent) {
	t.Helper()
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	r.pause = opts.pause
	if opts.pickClocks != nil {
		opts.clocks = opts.pickClocks(r)
	}
	gw := startHub(t, ns, tune...)
	site := newSite(t)
	const router = "127.0.0.1:17443"
	_, err := site.Forward(router, gw.Addr())
	must(t, err)
	agents := startAgents(t, site, ns, 4, prefix+strings.TrimPrefix(ns, "faults-"), "https://"+router, gw.CA().Pin(), opts)
	r.setAgents(agents)
	return r, agents
}

// build compiles fleet-agent, in the build whose clock a host's options
// can move (hostclock's faultclock), and the node simulator (as kubeadm).
func build(t *testing.T) (agentBin, simBin string) {
	t.Helper()
	dir := t.TempDir()
	for pkg, out := range map[string]string{"./cmd/fleet-agent": "fleet-agent", "./test/nodesim": "kubeadm"} {
		cmd := exec.Command("go", "build", "-tags", "faultclock", "-o", filepath.Join(dir, out), pkg)
		cmd.Dir = filepath.Join("..", "..")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	return filepath.Join(dir, "fleet-agent"), filepath.Join(dir, "kubeadm")
}

// agent is one edge host: a sandbox root and a fleet-agent process in the
// site's network namespace and in a freezer cgroup of its own, which holds
// every process the agent starts, so that a power cut can end them all.
type agent struct {
	name   string
	root   string
	cmd    *exec.Cmd
	exited chan struct{}
	cgroup string
	args   []string
	// env is added to the agent's environment.
	env []string
	// stateDir is the mount point of the agent's state directory when it
	// is a file system of its own.
	stateDir string
	log      *testkit.SyncBuffer
}

// hostOptions is what a host has besides the defaults.
type hostOptions struct {
	// pause is how long a reset sleeps after it records itself, so that a
	// power cut can fall inside it.
	pause time.Duration
	// stateFS puts the agent's state directory on a file system of its
	// own (a 16 MiB tmpfs), which the suite can fill or make read-only.
	stateFS bool
	// clocks[i] is how far host i's clock is ahead of the hub's (as
	// startAgents numbers them; none: every clock agrees); clock is the
	// one host's.
	clocks []time.Duration
	clock  time.Duration
	// pickClocks, when set, draws clocks from the run's seed.
	pickClocks func(*run) []time.Duration
}

// startAgent starts host name's agent in site s, enrolling with token.
// Its keepalive (2 s) and reconnection back-off (at most 3 s) are
// compressed like the hub's; its reset records itself before kubeadm's.
func startAgent(t *testing.T, s *testhost.Site, name, agentBin, simBin, hubURL, pin, token string, workloadKubeconfig []byte, opts hostOptions) *agent {
	t.Helper()
	root := t.TempDir()
	pause := ""
	if opts.pause > 0 {
		pause = fmt.Sprintf("\n- sleep %g", opts.pause.Seconds())
	}
	config := fmt.Sprintf(`hub: %s
caCertHash: %s
token: %s
rootDir: %s
stateDir: %s
sandbox: true
keepAlive: 2s
maxBackoff: 3s
resyncInterval: 5s
resetCommands:
- mkdir -p %s && echo "$(date +%%s.%%N) reset" >> %s%s
- kubeadm reset -f
`, hubURL, pin, token, root, filepath.Join(root, "var/lib/fleet-agent"), filepath.Dir(historyFile), historyFile, pause)
	files := map[string]string{
		"etc/hostname":             name + "\n",
		"etc/machine-id":           fmt.Sprintf("%032x", name)[:32] + "\n",
		"etc/os-release":           "PRETTY_NAME=\"fleet fault-suite sandbox\"\n",
		"etc/passwd":               "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                "root:x:0:\n",
		"etc/fleet-sim/kubeconfig": string(workloadKubeconfig),
		"etc/fleet-agent.yaml":     config,
	}
	for p, c := range files {
		must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(c), 0o600))
	}
	sim, err := os.ReadFile(simBin)
	must(t, err)
	must(t, os.MkdirAll(filepath.Join(root, "opt/fleet/bin"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "opt/fleet/bin/kubeadm"), sim, 0o755))

	a := &agent{name: name, root: root, log: &testkit.SyncBuffer{}, env: []string{hostclock.OffsetEnv + "=" + opts.clock.String()},
		cgroup: filepath.Join(freezerRoot, fmt.Sprintf("fleet-faults-%d-%s", os.Getpid(), name)),
		args:   []string{"nsenter", "--net=" + s.Path(), "--", agentBin, "--config", filepath.Join(root, "etc/fleet-agent.yaml")}}
	if opts.stateFS {
		a.stateDir = filepath.Join(root, "var/lib/fleet-agent")
		must(t, os.MkdirAll(a.stateDir, 0o700))
		must(t, syscall.Mount("tmpfs", a.stateDir, "tmpfs", 0, "size=16m,mode=0700"))
		// Registered before the agent's stop, so it runs after it.
		t.Cleanup(func() { _ = syscall.Unmount(a.stateDir, syscall.MNT_DETACH) })
	}
	must(t, os.Mkdir(a.cgroup, 0o755))
	t.Cleanup(func() {
		a.stop(t)
		_ = os.Remove(a.cgroup)
	})

	must(t, a.boot())
	return a
}

// freezerRoot is cgroup v1's freezer hierarchy.
const freezerRoot = "/sys/fs/cgroup/freezer"

// boot starts the agent in its cgroup: the shell joins it, then becomes
// the agent, so no process of the host runs outside it.
func (a *agent) boot() error {
	a.cmd = exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, a.cgroup}, a.args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
	a.cmd.Env = append(os.Environ(), a.env...)
	if err := a.cmd.Start(); err != nil {
		return fmt.Errorf("starting the agent of %s: %w", a.name, err)
	}
	exited := make(chan struct{})
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(exited) }(a.cmd)
	a.exited = exited
	return nil
}

// powerCut ends every process of the host at once, as a power cut does:
// the cgroup is frozen, so none can react or fork, then all are killed.
func (a *agent) powerCut() error {
	state := filepath.Join(a.cgroup, "freezer.state")
	// A task in uninterruptible sleep (an fsync on a busy disk) holds the
	// cgroup in FREEZING; writing FROZEN again retries it. One that never
	// freezes cannot react either: it is killed with the rest.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := os.WriteFile(state, []byte("FROZEN"), 0o644); err != nil {
			return fmt.Errorf("freezing %s: %w", a.name, err)
		}
		b, err := os.ReadFile(state)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(b)) == "FROZEN" {
			break
		}
	}
	procs, err := os.ReadFile(filepath.Join(a.cgroup, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, f := range strings.Fields(string(procs)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.WriteFile(state, []byte("THAWED"), 0o644); err != nil {
		return fmt.Errorf("thawing %s: %w", a.name, err)
	}
	<-a.exited
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(a.cgroup, "cgroup.procs"))
		if err != nil {
			return err
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's processes still alive 10 s after the power cut: %s", a.name, b)
		}
	}
}

func (a *agent) stop(t *testing.T) {
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(20 * time.Second):
			if err := a.powerCut(); err != nil {
				t.Log(err)
			}
		}
	}
	if t.Failed() {
		log := a.log.String()
		t.Logf("--- agent %s log (tail) ---\n%s", a.name, log[max(0, len(log)-3000):])
	}
}

// tokenFor makes an enrollment token whose hosts are labelled role=role.
func tokenFor(t *testing.T, ns, role string) string {
	t.Helper()
	tok, _, err := enrollment.CreateToken(context.Background(), hub.Client, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns,
		HostLabels: map[string]string{"role": role}}, time.Now())
	must(t, err)
	return tok
}

// createCluster makes the Cluster and its EdgeCluster, with a kubeconfig
// that points at the workload API server, which it returns.
func createCluster(t *testing.T, ns string) []byte {
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
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: "faults.fleet.internal", Port: 6443}}}))
	return wkc
}

// createMachine writes a Machine, its KubeadmConfig (init for the control
// plane, join otherwise) whose bootstrap records itself in the host's
// history, then sleeps pause, and its EdgeMachine, which picks a host
// labelled role=role.
func createMachine(t *testing.T, ns, name, role string, pause time.Duration) {
	t.Helper()
	ctx, c := context.Background(), hub.Client
	reg := bootstrapv1.NodeRegistrationOptions{Name: "{{ ds.meta_data.local_hostname }}",
		KubeletExtraArgs: []bootstrapv1.Arg{{Name: "provider-id", Value: ptr.To("{{ ds.meta_data.provider_id }}")}}}
	spec := bootstrapv1.KubeadmConfigSpec{PreKubeadmCommands: []string{
		fmt.Sprintf(`mkdir -p %s && echo "$(date +%%s.%%N) bootstrap %s" >> %s`, filepath.Dir(historyFile), name, historyFile)}}
	if pause > 0 {
		spec.PreKubeadmCommands = append(spec.PreKubeadmCommands, fmt.Sprintf("sleep %g", pause.Seconds()))
	}
	machineLabels := map[string]string{clusterv1.ClusterNameLabel: clusterName}
	if role == "cp" {
		spec.InitConfiguration = bootstrapv1.InitConfiguration{NodeRegistration: reg}
		machineLabels[clusterv1.MachineControlPlaneLabel] = ""
	} else {
		spec.JoinConfiguration = bootstrapv1.JoinConfiguration{NodeRegistration: reg}
	}
	must(t, c.Create(ctx, &bootstrapv1.KubeadmConfig{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{clusterv1.ClusterNameLabel: clusterName}}, Spec: spec}))
	must(t, c.Create(ctx, &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: infrav1.EdgeMachineSpec{HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}}}))
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
