package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
)

// The demo as a user runs it, driven through its input: with real edge
// hosts where the machine can run them (under CI it must), and with the
// node simulator, forced by --nodes=simulated.
func TestDemo(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the demo needs root (hosts in namespaces); CI runs as root")
		}
		t.Skip("the demo needs root")
	}
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	k8s := os.Getenv("KUBEBUILDER_ASSETS")
	if k8s == "" {
		k8s = filepath.Join(repo, "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(k8s, "kube-apiserver")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no kube-apiserver in %s", k8s)
		}
		t.Skipf("no kube-apiserver in %s: run make k8s", k8s)
	}
	bin := t.TempDir()
	for out, pkg := range map[string]string{"fleet-hub": "./cmd/fleet-hub", "fleet-agent": "./cmd/fleet-agent",
		"kubectl-fleet": "./cmd/kubectl-fleet", "fleet-nodesim": "./test/nodesim", "fleet-demo": "./hack/demo"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg)
		cmd.Dir = repo
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	// The real demo's workload and the tool that packs its image.
	for _, b := range []struct{ out, dir, pkg string }{
		{"fleet-echoserver", repo, "./test/echoserver"},
		{"nodeimage", filepath.Join(repo, "hack", "tools", "k8s"), "./cmd/nodeimage"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, b.out), b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b.pkg, err, out)
		}
	}
	must(t, os.Symlink(k8s, filepath.Join(bin, "k8s")))
	must(t, os.Symlink(filepath.Join(repo, "bin", "edge-image"), filepath.Join(bin, "edge-image")))
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		testRealDemo(t, repo, bin)
	})
	t.Run("simulated", func(t *testing.T) {
		t.Parallel()
		testSimulatedDemo(t, bin)
	})
}

// startDemo runs the demo binary with args, its input a pipe; the
// cleanup kills what is left of it after a failure and shows its output
// and logs.
func startDemo(t *testing.T, bin, data string, logs []string, args ...string) (out *syncBuffer, say func(string), exited chan error, input io.Closer) {
	out = &syncBuffer{}
	stdin, w := io.Pipe()
	demo := exec.Command(filepath.Join(bin, "fleet-demo"), append([]string{"--data-dir", data, "--bin-dir", bin,
		"--gateway-bind-address", freeAddr(t)}, args...)...)
	demo.Stdin, demo.Stdout, demo.Stderr = stdin, out, out
	must(t, demo.Start())
	exited = make(chan error, 1)
	go func() { exited <- demo.Wait() }()
	t.Cleanup(func() {
		if demo.ProcessState == nil {
			_ = demo.Process.Kill()
		}
		if t.Failed() {
			t.Logf("--- demo output ---\n%s", tail(out.String(), 12000))
			for _, l := range logs {
				b, _ := os.ReadFile(filepath.Join(data, l))
				t.Logf("--- %s ---\n%s", l, tail(string(b), 3000))
			}
		}
		_ = localkube.Kill(mustPIDs(t, data), 5*time.Second)
	})
	say = func(line string) {
		t.Helper()
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			t.Fatalf("telling the demo %q: %v", line, err)
		}
	}
	return out, say, exited, w
}

// quitDemo says quit and waits for the demo to end with nothing left
// running.
func quitDemo(t *testing.T, say func(string), input io.Closer, exited <-chan error, data string) {
	t.Helper()
	say("quit")
	// exec's Wait also waits for the copy of our input to the process.
	_ = input.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the demo exited with %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the demo did not stop within 3 minutes of quit")
	}
	if pids := mustPIDs(t, data); len(pids) != 0 {
		t.Errorf("processes left behind after quit: %v", describePIDs(pids))
	}
}

var describeClusterRow = regexp.MustCompile(`(?m)^Cluster/demo\s+(\S+)`)

// describeReady reads the READY cells of the rows of `kubectl fleet
// describe cluster` whose name starts with prefix.
func describeReady(out, prefix string) []string {
	var ready []string
	re := regexp.MustCompile(`(?m)^[│├└─ ]*` + regexp.QuoteMeta(prefix) + `\S*\s+(\S+)`)
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		ready = append(ready, m[1])
	}
	return ready
}

// With real hosts: a KubeadmControlPlane cluster on kubeadm, kubelet and
// containerd, READY True; a pod on one host reaches a Service of pods on
// the other by its DNS name; the kubectl commands the demo prints reach its
// nodes through the hub; an agent stops and starts through its unit; quit
// leaves no host, site or process.
func testRealDemo(t *testing.T, repo, bin string) {
	testhost.Require(t, filepath.Join(bin, "edge-image", "rootfs"), "real edge hosts")
	data := filepath.Join(t.TempDir(), ".fleet")
	out, say, exited, input := startDemo(t, bin, data, []string{"hub.log", "demo/hosts/edge-1/console.log"},
		"--nodes=real", "--agents", "2", "--proxy-bind-address", freeAddr(t),
		"--kubeadm-config", filepath.Join(repo, "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"))
	t.Cleanup(func() {
		// A demo that was killed leaves its hosts: remove them.
		if _, err := testhost.Sweep(); err != nil {
			t.Error(err)
		}
	})

	waitOutput(t, out, exited, "Commands here", 1, 10*time.Minute)
	if !strings.Contains(out.String(), "==> real edge hosts: ") {
		t.Errorf("the demo does not say it runs real hosts")
	}
	if m := describeClusterRow.FindStringSubmatch(out.String()); m == nil || m[1] != "True" {
		t.Errorf("describe shows Cluster/demo READY %v, want True", m)
	}
	c := hubClient(t, data)
	ctx := context.Background()
	if err := testenv.MachinesRunning(ctx, c, "", 2); err != nil {
		t.Fatalf("after the demo came up: %v", err)
	}

	// The commands it prints to try, run as printed.
	nodes := printedCommand(t, out.String(), "get nodes -o wide")
	if got := runPrinted(t, bin, nodes); !regexp.MustCompile(`(?m)^edge-1\s+Ready\s`).MatchString(got) ||
		!regexp.MustCompile(`(?m)^edge-2\s+Ready\s`).MatchString(got) {
		t.Errorf("%s: want edge-1 and edge-2 Ready:\n%s", nodes, got)
	}
	// A pod on edge-1 (the control plane) reached the Service of edge-2's
	// pods by its DNS name.
	if !regexp.MustCompile(`exec client -- /fleet-echoserver --get http://web\.default\.svc\.cluster\.local/\nhello from web-`).MatchString(out.String()) {
		t.Errorf("the demo does not show the client pod's answer from the web Service")
	}
	pods := printedCommand(t, out.String(), "get pods -A")
	if got := runPrinted(t, bin, pods); !regexp.MustCompile(`(?m)^kube-system\s+kube-apiserver-edge-1\s+1/1\s+Running`).MatchString(got) {
		t.Errorf("%s: want kube-apiserver-edge-1 Running:\n%s", pods, got)
	}

	// The agent's unit stops and starts; the host comes back the same.
	uids := hostUIDs(t, c)
	say("stop edge-2")
	eventually(t, "edge-2 shown disconnected by kubectl fleet get hosts", func() error {
		return hostRow(t, bin, data, "edge-2", "False")
	})
	say("start edge-2")
	eventually(t, "edge-2 connected again", func() error { return hostRow(t, bin, data, "edge-2", "True") })
	if got := hostUIDs(t, c); !equalMaps(got, uids) {
		t.Errorf("a restarted agent re-enrolled: hosts %v, were %v", got, uids)
	}

	quitDemo(t, say, input, exited, data)
	for _, name := range []string{"site-" + siteName, "host-edge-1", "host-edge-2"} {
		if _, err := os.Stat(filepath.Join(testhost.RecordDir, name+".json")); err == nil {
			t.Errorf("%s is still recorded after quit", name)
		}
	}
	netns, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	for _, ns := range []string{siteName, "fleet-edge-1", "fleet-edge-2"} {
		if regexp.MustCompile(`(?m)^` + ns + `\b`).Match(netns) {
			t.Errorf("network namespace %s is left after quit", ns)
		}
	}
}

// printedCommand finds the kubectl command ending in suffix among the
// lines the demo prints to try.
func printedCommand(t *testing.T, out, suffix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "kubectl --kubeconfig ") && strings.HasSuffix(l, suffix) {
			return l
		}
	}
	t.Fatalf("the demo prints no kubectl command ending in %q", suffix)
	return ""
}

// runPrinted runs a printed kubectl command with bin/k8s/kubectl.
func runPrinted(t *testing.T, bin, line string) string {
	t.Helper()
	args := strings.Fields(line)[1:]
	b, err := exec.Command(filepath.Join(bin, "k8s", "kubectl"), args...).CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v\n%s", line, err, b)
	}
	return string(b)
}

// With the node simulator: the embedded hub and the agents are separate
// processes; the cluster comes up on them; the hub restarts under them and
// keeps the fleet; a stopped agent is reported disconnected and comes back
// without re-enrolling; scale and delete give hosts back; and after quit
// no process is left.
func testSimulatedDemo(t *testing.T, bin string) {
	data := filepath.Join(t.TempDir(), ".fleet")
	out, say, exited, input := startDemo(t, bin, data, []string{"hub.log", "demo/logs/edge-1.log", "demo/logs/edge-3.log"},
		"--nodes=simulated", "--agents", "3")

	waitOutput(t, out, exited, "Commands here", 1, 10*time.Minute)
	if !strings.Contains(out.String(), "==> node simulator: --nodes=simulated") {
		t.Errorf("the demo does not say it runs the node simulator")
	}
	c := hubClient(t, data)
	ctx := context.Background()
	if err := testenv.MachinesRunning(ctx, c, "", 3); err != nil {
		t.Fatalf("after the demo came up: %v", err)
	}
	uids := hostUIDs(t, c)
	if len(uids) != 3 {
		t.Fatalf("%d hosts, want 3", len(uids))
	}
	for _, want := range []string{"kubectl fleet token create", "cluster demo: every machine Running", "KUBECONFIG=" + filepath.Join(data, "kubeconfig"), simulatorCaveat} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	// Healthy by Cluster API's own rules: KubeadmControlPlane counts the
	// control plane available from the Node and pods the simulator
	// registers, every Machine is Ready, the workers available.
	if strings.Contains(out.String(), "Please check controller logs") {
		t.Errorf("the demo's output sends the user to the controller logs")
	}
	for _, row := range []string{"Cluster/demo", "KubeadmControlPlane/demo-control-plane", "Machine/demo-control-plane-", "MachineDeployment/demo-md-0", "Machine/demo-md-0-"} {
		got := describeReady(out.String(), row)
		if len(got) == 0 {
			t.Errorf("describe shows no %s", row)
		}
		for _, r := range got {
			if r != "True" {
				t.Errorf("describe shows %s READY %v, want True", row, got)
				break
			}
		}
	}
	if got := describeReady(out.String(), "Machine/"); len(got) != 3 {
		t.Errorf("describe shows %d Machines, want 3", len(got))
	}
	for _, want := range []string{"1/1 ready", "2/2 ready"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe does not show %q", want)
		}
	}
	cluster := &clusterv1.Cluster{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, cluster))
	for _, cond := range []string{clusterv1.ClusterAvailableCondition, clusterv1.ClusterControlPlaneAvailableCondition, clusterv1.ClusterWorkersAvailableCondition} {
		if !conditions.IsTrue(cluster, cond) {
			t.Errorf("Cluster %s: %+v", cond, conditions.Get(cluster, cond))
		}
	}

	// Restart the embedded hub under the running agents: the fleet is
	// kept and the agents reconnect without re-enrolling.
	say("restart-hub")
	waitOutput(t, out, exited, "hub | fleet hub", 2, 5*time.Minute)
	c = hubClient(t, data) // new API server certificates
	eventually(t, "machines Running and every host connected after the hub restart", func() error {
		if err := testenv.MachinesRunning(ctx, c, "", 3); err != nil {
			return err
		}
		return testenv.HostsConnected(ctx, c, "", 3)
	})
	if got := hostUIDs(t, c); !equalMaps(got, uids) {
		t.Errorf("hosts changed across the hub restart: %v, were %v", got, uids)
	}

	// Stop an agent: the host is shown disconnected; start it: it is back,
	// the same host.
	say("stop edge-3")
	eventually(t, "edge-3 shown disconnected by kubectl fleet get hosts", func() error {
		return hostRow(t, bin, data, "edge-3", "False")
	})
	say("start edge-3")
	eventually(t, "edge-3 connected again", func() error { return hostRow(t, bin, data, "edge-3", "True") })
	if got := hostUIDs(t, c); !equalMaps(got, uids) {
		t.Errorf("a restarted agent re-enrolled: hosts %v, were %v", got, uids)
	}

	// Scale down, then delete: hosts go back to the pool.
	kubectlFleet(t, bin, data, "scale", "cluster", "demo", "--worker-machines", "1")
	eventually(t, "one host back in the pool after scale-down", func() error {
		if err := testenv.MachinesRunning(ctx, c, "", 2); err != nil {
			return err
		}
		return testenv.HostsAvailable(ctx, c, "", 1)
	})
	kubectlFleet(t, bin, data, "delete", "cluster", "demo", "--wait", "--timeout", "5m")
	eventually(t, "every host Available after the cluster is deleted", func() error { return testenv.HostsAvailable(ctx, c, "", 3) })

	quitDemo(t, say, input, exited, data)
}

func mustPIDs(t *testing.T, dir string) []int {
	pids, err := localkube.Processes(dir)
	if err != nil {
		t.Errorf("listing processes: %v", err)
	}
	return pids
}

func describePIDs(pids []int) []string {
	var out []string
	for _, p := range pids {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out = append(out, fmt.Sprintf("%d %s", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
	}
	return out
}

func hubClient(t *testing.T, data string) client.Client {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(data, "kubeconfig"))
	must(t, err)
	c, err := client.New(cfg, client.Options{Scheme: clusterapi.NewScheme()})
	must(t, err)
	return c
}

func kubectlFleet(t *testing.T, bin, data string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "kubectl-fleet"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(data, "kubeconfig"))
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl fleet %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}

// hostRow checks the CONNECTED column of a host in `kubectl fleet get
// hosts`, as an operator reads it.
func hostRow(t *testing.T, bin, data, host, connected string) error {
	out := kubectlFleet(t, bin, data, "get", "hosts")
	lines := strings.Split(out, "\n")
	// Read the cell under the header: an empty cell (a host nobody
	// claims) would shift the fields of a row split on spaces.
	col := strings.Index(lines[0], "CONNECTED")
	if col < 0 {
		t.Fatalf("no CONNECTED column in\n%s", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != host || len(l) <= col {
			continue
		}
		if cell := strings.Fields(l[col:]); len(cell) == 0 || cell[0] != connected {
			return fmt.Errorf("CONNECTED %v, want %s", cell, connected)
		}
		return nil
	}
	return fmt.Errorf("no row for %s in\n%s", host, out)
}

func hostUIDs(t *testing.T, c client.Client) map[string]types.UID {
	t.Helper()
	hosts := &infrav1.EdgeHostList{}
	must(t, c.List(context.Background(), hosts))
	m := map[string]types.UID{}
	for _, h := range hosts.Items {
		m[h.Name] = h.UID
	}
	return m
}

func equalMaps(a, b map[string]types.UID) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func waitOutput(t *testing.T, out *syncBuffer, exited <-chan error, s string, times int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for strings.Count(out.String(), s) < times {
		select {
		case err := <-exited:
			t.Fatalf("the demo exited (%v) before printing %q", err, s)
		case <-deadline:
			t.Fatalf("the demo did not print %q (%d times) within %s", s, times, timeout)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testkit.Eventually(t, 4*time.Minute, time.Second, what, cond)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func freeAddr(t *testing.T) string { return testkit.FreeAddr(t) }

type syncBuffer = testkit.SyncBuffer
