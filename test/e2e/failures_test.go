package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func hostCondition(ctx context.Context, c client.Client, ns, machine, condType string) (*metav1.Condition, error) {
	em := &infrav1.EdgeMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, em); err != nil {
		return nil, err
	}
	for i := range em.Status.Conditions {
		if em.Status.Conditions[i].Type == condType {
			return &em.Status.Conditions[i], nil
		}
	}
	return nil, fmt.Errorf("EdgeMachine %s has no %s condition", machine, condType)
}

// A failing bootstrap command shows on the EdgeMachine with its output, the
// Machine never goes Running, and a fixed Machine on the same host works.
// A hub restart in the middle of a bootstrap runs nothing twice, and an
// agent killed in the middle reports where it stopped instead of re-running.
func TestBootstrapFailuresAndRestarts(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	gw, stopHub := startFleetHub(t, ns, addr)
	hubURL := "https://" + addr
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	pin := gw.CA().Pin()
	cpToken, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns, HostLabels: map[string]string{"role": "cp"}}, time.Now())
	must(t, err)
	cp := startAgent(t, "f-cp-0", agentBin, simBin, hubURL, pin, cpToken, wkc)
	eventually(t, "host enrolled", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	// 1. A bootstrap command fails.
	createCPMachine(t, c, ns, "broken", []string{"echo the-broken-step-output; exit 3"})
	eventually(t, "failure reported on the EdgeMachine", func() error {
		cond, err := hostCondition(ctx, c, ns, "broken", infrav1.HostProvisionedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.ProvisioningFailedReason || !strings.Contains(cond.Message, "runcmd 1/") ||
			!strings.Contains(cond.Message, "exit 3") || !strings.Contains(cond.Message, "the-broken-step-output") {
			return fmt.Errorf("HostProvisioned %s: %s", cond.Reason, cond.Message)
		}
		return nil
	})
	m := &clusterv1.Machine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, m))
	if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
		t.Fatal("a Machine whose bootstrap failed went Running")
	}
	// Fixing means replacing the Machine; the host is reset and reused.
	must(t, c.Delete(ctx, m))
	eventually(t, "host back after the failed Machine is deleted", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })

	// 2. The hub restarts while a bootstrap runs: nothing runs twice.
	createCPMachine(t, c, ns, "steady", []string{"mkdir -p /var/log && echo run >> /var/log/fleet-e2e-runs", "sleep 6"})
	eventually(t, "bootstrap under way", func() error {
		cond, err := hostCondition(ctx, c, ns, "steady", infrav1.HostProvisionedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.ProvisioningReason {
			return fmt.Errorf("HostProvisioned %s", cond.Reason)
		}
		return nil
	})
	stopHub()
	time.Sleep(2 * time.Second)
	startFleetHub(t, ns, addr)
	eventually(t, "control plane Running after the hub restart", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	runs, err := os.ReadFile(filepath.Join(cp.root, "var/log/fleet-e2e-runs"))
	must(t, err)
	if n := strings.Count(string(runs), "run\n"); n != 1 {
		t.Fatalf("the bootstrap ran %d times across the hub restart", n)
	}

	// 3. An agent killed in the middle of a bootstrap.
	wToken, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns, HostLabels: map[string]string{"role": "worker"}}, time.Now())
	must(t, err)
	w := startAgent(t, "f-w-0", agentBin, simBin, hubURL, pin, wToken, wkc)
	eventually(t, "worker enrolled", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })
	createWorkerMachine(t, c, ns, "slow-worker", []string{"sleep 30"})
	eventually(t, "worker bootstrap under way", func() error {
		cond, err := hostCondition(ctx, c, ns, "slow-worker", infrav1.HostProvisionedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.ProvisioningReason || !strings.Contains(cond.Message, "runcmd") {
			return fmt.Errorf("HostProvisioned %s: %s", cond.Reason, cond.Message)
		}
		return nil
	})
	must(t, w.cmd.Process.Signal(syscall.SIGKILL))
	_ = w.cmd.Wait()
	w.restart(t)
	eventually(t, "interrupted bootstrap reported", func() error {
		cond, err := hostCondition(ctx, c, ns, "slow-worker", infrav1.HostProvisionedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.ProvisioningFailedReason || !strings.Contains(cond.Message, "restarted during the bootstrap at step runcmd") {
			return fmt.Errorf("HostProvisioned %s: %s", cond.Reason, cond.Message)
		}
		return nil
	})
	if err := testenv.MachinesRunning(ctx, c, ns, 2); err == nil {
		t.Fatal("the interrupted worker went Running")
	}
}
