package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
)

// The hub is killed with SIGKILL again and again while a site's hosts are
// provisioned and while all but the control plane are deleted, and
// started again on the same address each time, as its Deployment would.
// Nothing it was doing may be done twice or lost: no Machine bootstrapped
// twice, no host reset but those whose Machines were deleted, and the API
// server reads as the agents' records say once it stays up.
func TestHubKills(t *testing.T) {
	ns := hub.NewNamespace(t, "faults")
	r := newRun(t, ns)
	hp := startHubProcess(t, ns, hubOptions{})
	site := newSite(t)
	const router = "127.0.0.1:17443"
	_, err := site.Forward(router, hp.gateway)
	must(t, err)
	n := hosts(8)
	r.setAgents(startAgents(t, site, ns, n, "k"+strings.TrimPrefix(ns, "faults-"), "https://"+router, hp.pin(t), hostOptions{}))

	kill := func(f fault) error {
		hp.kill()
		time.Sleep(f.For)
		return hp.start()
	}
	machines := []string{"cp"}
	for i := range n - 1 {
		machines = append(machines, fmt.Sprintf("w%d", i))
	}
	rounds := *roundsFlag
	r.phase("provisioning", kills(r, rounds), kill, func() { r.createMachines(machines...) }, machines)
	r.phase("deletion", kills(r, rounds), kill, func() { r.deleteMachines(machines[1:]...) }, machines[:1])
	r.waitGone(machines[1:]...)
	r.check(n - 1)
}

// kills draws n kills of the hub: each after 2 to 8 s of running, down
// for up to 3 s.
func kills(r *run, n int) []fault {
	out := make([]fault, n)
	for i := range out {
		out[i] = fault{State: "hub killed", After: 2*time.Second + time.Duration(r.rng.IntN(6000))*time.Millisecond,
			For: time.Duration(r.rng.IntN(3000)) * time.Millisecond}
	}
	return out
}

// hubProcess is fleet-hub run as its Deployment runs it, on a fixed
// gateway address, killed and started again by the test; an exit of its
// own is followed by a start a second later, as the kubelet restarts a
// container.
type hubProcess struct {
	ns      string
	bin     string
	args    []string
	gateway string
	probe   string
	env     []string
	log     *testkit.SyncBuffer

	mu sync.Mutex
	// logStart is where the running process's log begins.
	logStart int
	cmd      *exec.Cmd
	exited   chan struct{}
	killed   bool // the test ended the running process
	closed   bool // the test is over
	restarts int  // exits of its own, each followed by a start
}

// hubOptions is how a hub process differs from the default.
type hubOptions struct {
	// apiServer is the host:port the hub reaches the API server at (a
	// relay the test controls); "" is the API server itself.
	apiServer string
	// leaderElect runs the hub as its Deployment does, leading by a Lease
	// of 15 s.
	leaderElect bool
	// replica names one of several replicas (its POD_NAME), which lead by
	// a Lease of 6 s.
	replica string
}

func startHubProcess(t *testing.T, ns string, opts hubOptions) *hubProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-hub")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fleet-hub")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building fleet-hub: %v\n%s", err, out)
	}
	kc := filepath.Join(dir, "hub.kubeconfig")
	cfg := rest.CopyConfig(hub.Config)
	if opts.apiServer != "" {
		cfg.Host = "https://" + opts.apiServer
	}
	must(t, testenv.WriteKubeconfigOf(cfg, kc))
	hp := &hubProcess{ns: ns, bin: bin, gateway: testkit.FreeAddr(t), probe: testkit.FreeAddr(t), log: &testkit.SyncBuffer{}}
	hp.args = []string{"--kubeconfig", kc, "--namespace", ns, "--hub-namespace", ns, fmt.Sprintf("--leader-elect=%v", opts.leaderElect),
		"--leader-election-namespace", ns, "--metrics-bind-address=0", "--health-probe-bind-address=" + hp.probe,
		"--gateway-bind-address=" + hp.gateway, "--gateway-ips=127.0.0.1", "--disconnect-grace=0",
		"--proxy-bind-address=0", "--runtime-extension-bind-address=127.0.0.1:0", "--runtime-extension-service=",
		"--host-access-bind-address=127.0.0.1:0", "--host-access-service=", "--zap-log-level=info"}
	if opts.replica != "" {
		hp.args = append(hp.args, "--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s")
		hp.env = []string{"POD_NAME=" + opts.replica}
	}
	must(t, hp.start())
	t.Cleanup(func() {
		hp.mu.Lock()
		hp.closed = true
		hp.mu.Unlock()
		hp.kill()
		if t.Failed() {
			log := hp.log.String()
			t.Logf("--- fleet-hub log (tail) ---\n%s", log[max(0, len(log)-6000):])
		}
	})
	return hp
}

// start runs the hub and waits until it is ready.
func (hp *hubProcess) start() error {
	if err := hp.spawn(false); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + hp.probe + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("fleet-hub not ready within a minute of its start")
		}
	}
}

// spawn starts the hub process and watches for its exit; a restart
// after an exit of its own is dropped if the test killed the hub or
// ended meanwhile.
func (hp *hubProcess) spawn(restart bool) error {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	if restart && (hp.killed || hp.closed) {
		return nil
	}
	cmd := exec.Command(hp.bin, hp.args...)
	cmd.Env = append(cmd.Environ(), hp.env...)
	cmd.Stdout, cmd.Stderr = hp.log, hp.log
	hp.logStart = len(hp.log.String())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting fleet-hub: %w", err)
	}
	exited := make(chan struct{})
	hp.cmd, hp.exited, hp.killed = cmd, exited, false
	go func() {
		err := cmd.Wait()
		close(exited)
		hp.mu.Lock()
		again := !hp.killed && !hp.closed
		if again {
			hp.restarts++
			fmt.Fprintf(hp.log, "--- fleet-hub exited (%v); starting it again in 1 s ---\n", err)
		}
		hp.mu.Unlock()
		if again {
			time.Sleep(time.Second)
			if err := hp.spawn(true); err != nil {
				fmt.Fprintf(hp.log, "--- %v ---\n", err)
			}
		}
	}()
	return nil
}

// leads tells whether the running process holds the leader Lease, by
// its log.
func (hp *hubProcess) leads() bool {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	select {
	case <-hp.exited:
		return false
	default:
	}
	return strings.Contains(hp.log.String()[hp.logStart:], "Successfully acquired lease")
}

// kill ends the hub with SIGKILL: no shutdown, no last writes.
func (hp *hubProcess) kill() {
	hp.mu.Lock()
	cmd, exited := hp.cmd, hp.exited
	hp.killed = true
	hp.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// pin is the hub CA's pin, from the ConfigMap the gateway publishes.
func (hp *hubProcess) pin(t *testing.T) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	testkit.Eventually(t, time.Minute, time.Second, "the hub's CA pin published", func() error {
		if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: hp.ns, Name: hubinfo.ConfigMap}, cm); err != nil {
			return err
		}
		if cm.Data[hubinfo.KeyCAPin] == "" {
			return errors.New("no pin yet")
		}
		return nil
	})
	return cm.Data[hubinfo.KeyCAPin]
}
