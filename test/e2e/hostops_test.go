package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/cli"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/test/nodesim/sim"
)

// kubectlFleet runs `kubectl fleet args…` in-process against the hub, in
// namespace ns, as an operator would.
func kubectlFleet(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "hub.kubeconfig")
	must(t, os.WriteFile(kc, kubeconfig.FromEnvTestConfig(hub.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}), 0o600))
	var out, errOut bytes.Buffer
	cmd := cli.NewRootCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kc, "-n", ns}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// onlyHost is the name of the namespace's one EdgeHost.
func onlyHost(t *testing.T, ns string) string {
	t.Helper()
	hosts := &infrav1.EdgeHostList{}
	must(t, hub.Client.List(context.Background(), hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 1 {
		t.Fatalf("%d hosts in %s, want 1", len(hosts.Items), ns)
	}
	return hosts.Items[0].Name
}

func eventOn(ctx context.Context, ns, kind, name, reason string) (*eventsv1.Event, error) {
	evs := &eventsv1.EventList{}
	if err := hub.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	for i, e := range evs.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
			return &evs.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no %s Event on %s %s", reason, kind, name)
}

// serveMachine starts a hub in a new namespace and one agent on host
// name, whose host then serves the control-plane Machine "cp", Running.
func serveMachine(t *testing.T, name string) (ns, host string, a *agentProc) {
	t.Helper()
	ctx := context.Background()
	ns = newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	gw, _ := startFleetHub(t, ns, addr)
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns, HostLabels: map[string]string{"role": "cp"}}, time.Now())
	must(t, err)
	a = startAgent(t, name, agentBin, simBin, "https://"+addr, gw.CA().Pin(), token, wkc)
	eventually(t, "host enrolled", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })
	host = onlyHost(t, ns)
	createCPMachine(t, c, ns, "cp", nil)
	eventually(t, "Machine Running", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	return ns, host, a
}

// The hardware of a host that serves a Machine dies (its agent is killed):
// `host remove` refuses and names the Machine; `--force` removes the host,
// says what was given up, and leaves Events on the host and the Machine.
// The agent, when it comes back, is refused: its identity was revoked.
func TestDeadHostRemovedByForce(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	ns, host, a := serveMachine(t, "dead-cp-0")

	a.kill(t)
	eventually(t, "agent gone", func() error {
		h := &infrav1.EdgeHost{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: host}, h))
		if cond := findCondition(h.Status.Conditions, infrav1.AgentConnectedCondition); cond == nil || cond.Status == metav1.ConditionTrue {
			return fmt.Errorf("AgentConnected %v", cond)
		}
		return nil
	})
	_, err := kubectlFleet(t, ns, "host", "remove", host)
	if err == nil || !strings.Contains(err.Error(), "serves Machine "+ns+"/cp") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("remove of a host serving a Machine: %v", err)
	}
	out, err := kubectlFleet(t, ns, "host", "remove", host, "--force")
	if err != nil || !strings.Contains(out, "edgehost/"+host+" removed by force") ||
		!strings.Contains(out, "given up: Machine "+ns+"/cp lost its host") || !strings.Contains(out, "given up: the host was not reset") {
		t.Fatalf("remove --force: %v\n%s", err, out)
	}
	if hosts := (&infrav1.EdgeHostList{}); c.List(ctx, hosts, client.InNamespace(ns)) != nil || len(hosts.Items) != 0 {
		t.Fatalf("the host is still there after remove --force")
	}
	for _, kind := range []string{"EdgeHost", "Machine"} {
		name := map[string]string{"EdgeHost": host, "Machine": "cp"}[kind]
		eventually(t, "RemovedByForce Event on the "+kind, func() error {
			e, err := eventOn(ctx, ns, kind, name, "RemovedByForce")
			if err != nil {
				return err
			}
			if !strings.Contains(e.Note, "Machine cp lost its host, which was not reset") {
				return fmt.Errorf("event: %s", e.Note)
			}
			return nil
		})
	}
	eventually(t, "the EdgeMachine says its host is lost", func() error {
		cond, err := hostCondition(ctx, c, ns, "cp", infrav1.HostClaimedCondition)
		if err != nil {
			return err
		}
		if cond.Reason != infrav1.HostLostReason {
			return fmt.Errorf("HostClaimed %s: %s", cond.Reason, cond.Message)
		}
		return nil
	})

	// The machine comes back: its identity is revoked, and holding a
	// workload it neither re-enrolls nor resets on its own.
	a.restart(t)
	eventually(t, "the returning agent is refused", func() error {
		// Its EdgeHost is gone: the hub cannot tell a deletion from a restore
		// that lacks it, and says UnknownHost (or Revoked, had the agent been
		// connected at the deletion).
		l := a.log.String()
		if !strings.Contains(l, "Hub revoked this host's identity") && !strings.Contains(l, "the hub has no EdgeHost for this host") {
			return fmt.Errorf("not refused yet")
		}
		return nil
	})
	hosts := &infrav1.EdgeHostList{}
	must(t, c.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 0 || strings.Contains(a.log.String(), "Resetting host") {
		t.Fatalf("a revoked agent came back as %d host(s) or reset its host:\n%s", len(hosts.Items), tail(a.log.String(), 3000))
	}
}

// A reset fails (the host's `kubeadm reset` errors): the host is
// NeedsAttention and stays so until the operator has the cause fixed and
// runs `host retry`; the same agent process then resets the host and it
// is Available again.
func TestFailedResetRetried(t *testing.T) {
	ctx := context.Background()
	c := hub.Client
	ns, host, a := serveMachine(t, "retry-cp-0")

	failFile := filepath.Join(a.root, sim.ResetFailsFile)
	must(t, os.WriteFile(failFile, []byte("the disk is read-only\n"), 0o644))
	m := &clusterv1.Machine{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cp"}, m))
	must(t, c.Delete(ctx, m))
	eventually(t, "reset failed: NeedsAttention", func() error {
		h := &infrav1.EdgeHost{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: host}, h))
		if p := h.Status.Provisioning; h.Status.Phase != infrav1.HostNeedsAttention || p == nil || !strings.Contains(p.Message, "the disk is read-only") {
			return fmt.Errorf("phase %s provisioning %+v", h.Status.Phase, h.Status.Provisioning)
		}
		return nil
	})
	if _, err := kubectlFleet(t, ns, "host", "remove", host); err == nil || !strings.Contains(err.Error(), "host retry "+host) {
		t.Fatalf("remove of a host whose reset failed: %v", err)
	}

	must(t, os.Remove(failFile))
	out, err := kubectlFleet(t, ns, "host", "retry", host, "--wait", "--timeout", waitTimeout.String())
	if err != nil || !strings.Contains(out, "edgehost/"+host+" reset ordered again (retry 1)") || !strings.HasSuffix(out, "edgehost/"+host+" Available\n") {
		t.Fatalf("retry: %v\n%s", err, out)
	}
	if a.cmd.ProcessState != nil {
		t.Fatal("the agent exited")
	}
	log := a.log.String()
	if n := strings.Count(log, "Reset failed"); n != 1 {
		t.Errorf("the reset failed %d times, want once (the agent retries only when ordered):\n%s", n, tail(log, 3000))
	}
	if !strings.Contains(log, "Host reset") {
		t.Errorf("no successful reset in the agent's log:\n%s", tail(log, 3000))
	}
	// Decommissioned: with its agent stopped (a running one would enroll
	// again with its still valid token), the clean host goes at once.
	a.stop(t)
	out, err = kubectlFleet(t, ns, "host", "remove", host)
	if err != nil || out != "edgehost/"+host+" removed\n" {
		t.Fatalf("remove of the reset host: %v %q", err, out)
	}
}

func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
