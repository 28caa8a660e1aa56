package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// A worker host dies for real — its power is cut — on a site with a spare
// host: the workload cluster's controller manager marks the
// Node NotReady, the MachineHealthCheck that `create cluster` wrote finds
// it unhealthy, the MachineSet replaces the Machine, and the replacement
// is a Node on the spare host. The dead host is released but never handed
// out: it stays Deprovisioning until it is back and its agent has reset
// it. The control plane's host loses its power in the middle of its reset
// when the cluster is deleted, and is reset once it is back.
// The one-host control plane's own Node going NotReady is never remediated
// (KubeadmControlPlane refuses, and `kubectl fleet describe` says so), and
// comes back healthy with its kubelet.
func TestRealNodesRemediation(t *testing.T) {
	bin := realKit(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	const lan = "10.96.7"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "mhc", lan, gw)

	cpToken, wToken := roleTokens(t, ns)
	prefix := fmt.Sprintf("mh%d", os.Getpid()%100000)
	pin := gw.CA().Pin()
	hosts := map[string]*testhost.Host{}
	for name, token := range map[string]string{prefix + "-cp": cpToken, prefix + "-w1": wToken, prefix + "-w2": wToken} {
		hosts[name] = startRealHost(t, site, bin, name, hubURL, pin, token)
	}
	cpHost := hosts[prefix+"-cp"]
	realEventually(t, "3 real hosts enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 3) })

	// Short health checks, as `create cluster --unhealthy-timeout 20s
	// --host-unready-timeout 10m` writes them: the Node's NotReady is what
	// gets the Machine replaced here.
	spec := realClusterSpec(t, ns)
	spec.HealthCheck = &clustertemplate.HealthCheck{NodeStartupTimeout: 10 * time.Minute, UnhealthyTimeout: 20 * time.Second,
		HostUnreadyTimeout: 10 * time.Minute, MaxUnhealthy: intstr.FromString("100%")}
	for _, o := range clustertemplate.Objects(spec) {
		must(t, c.Create(ctx, o))
	}
	realEventually(t, "Cluster Available on real nodes", func() error { return clusterAvailable(ctx, c, ns) })
	kc := fleetKubeconfig(t, ns)
	var first *clusterv1.Machine
	var deadName string
	realEventually(t, "the worker Running", func() error {
		m, err := liveWorker(ctx, c, ns)
		if err != nil {
			return err
		}
		if m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return fmt.Errorf("worker Machine %s is %s", m.Name, m.Status.Phase)
		}
		first = m
		deadName, err = hostOf(ctx, c, ns, m)
		return err
	})
	dead := hosts[deadName]
	spareName := prefix + "-w1"
	if deadName == spareName {
		spareName = prefix + "-w2"
	}
	realEventually(t, "Node "+deadName+" Ready", func() error { return nodeReady(t, kc, deadName, inventory.ProviderIDOf(ns, deadName)) })

	// The worker host loses its power: agent, kubelet and pods die at once.
	must(t, dead.PowerCut())
	sawAgentGone := false
	realEventually(t, "the dead worker's Machine replaced by one Running on "+spareName, func() error {
		em := &infrav1.EdgeMachine{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: first.Spec.InfrastructureRef.Name}, em); err == nil &&
			conditions.GetReason(em, infrav1.HostAgentConnectedCondition) == infrav1.AgentDisconnectedReason {
			sawAgentGone = true
		}
		m, err := liveWorker(ctx, c, ns)
		if err != nil {
			return err
		}
		if m.Name == first.Name || m.Status.Phase != string(clusterv1.MachinePhaseRunning) {
			return fmt.Errorf("worker Machine %s is %s (%s)", m.Name, m.Status.Phase, conditionsLine(m))
		}
		if got, err := hostOf(ctx, c, ns, m); err != nil || got != spareName {
			return fmt.Errorf("the replacement is on %q: %v", got, err)
		}
		return nil
	})
	if !sawAgentGone {
		t.Errorf("the dead worker's EdgeMachine never read %s=%s", infrav1.HostAgentConnectedCondition, infrav1.AgentDisconnectedReason)
	}
	realEventually(t, "Node "+spareName+" Ready", func() error { return nodeReady(t, kc, spareName, inventory.ProviderIDOf(ns, spareName)) })
	realEventually(t, "the old Machine gone", func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(first), &clusterv1.Machine{})
		if err == nil {
			return fmt.Errorf("Machine %s still there", first.Name)
		}
		return client.IgnoreNotFound(err)
	})
	// Released, but not Available: nobody has reset it.
	h := &infrav1.EdgeHost{}
	must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: deadName}, h))
	if h.Spec.ClaimRef != nil || h.Status.Phase != infrav1.HostDeprovisioning {
		t.Errorf("dead host %s: phase %s, claim %v; want Deprovisioning and released", deadName, h.Status.Phase, h.Spec.ClaimRef)
	}

	// The control plane's only host loses its kubelet: unhealthy, but never
	// remediated into nothing, and describe says why.
	fleetCLI := newFleetCLI(t)
	must(t, cpHost.Unit(ctx, "stop", "kubelet.service"))
	realEventually(t, "describe says the one control-plane Machine is not remediated", func() error {
		out := fleetCLI.run(t, "describe", "cluster", clusterName, "-n", ns)
		if !strings.Contains(out, "not remediated: KubeadmControlPlane can't remediate if current replicas are less or equal to 1") {
			return errors.New(out)
		}
		t.Logf("kubectl fleet describe cluster:\n%s", out)
		return nil
	})
	cpMachine := machineOnHost(ctx, t, c, ns, cpHost.Name)
	if !cpMachine.DeletionTimestamp.IsZero() {
		t.Fatalf("the only control-plane Machine %s is being deleted", cpMachine.Name)
	}
	must(t, cpHost.Unit(ctx, "start", "kubelet.service"))
	realEventually(t, "the control plane healthy again", func() error {
		m := &clusterv1.Machine{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(cpMachine), m); err != nil {
			return err
		}
		if !conditions.IsTrue(m, clusterv1.MachineHealthCheckSucceededCondition) || conditions.Has(m, clusterv1.MachineOwnerRemediatedCondition) {
			return fmt.Errorf("Machine %s: %s", m.Name, conditionsLine(m))
		}
		return nil
	})

	// The dead host's power comes back: its agent resets it on the hub's
	// order, and the host returns to the pool. Its kubelet, started at
	// boot with the old cluster's credentials, leaves no Node behind.
	must(t, dead.PowerOn(ctx))
	realEventually(t, "the dead host reset and Available", func() error {
		if err := hostPhase(ctx, c, ns, deadName, infrav1.HostAvailable); err != nil {
			return err
		}
		return hostClean(dead)
	})
	realEventually(t, "no Node "+deadName+" in the workload cluster", func() error {
		if out := kubectl(t, kc, "get", "node", deadName, "-o", "name", "--ignore-not-found"); out != "" {
			return fmt.Errorf("the workload cluster has %s", out)
		}
		return nil
	})

	// The control plane's host loses its power in the middle of its reset
	// (kubeadm reset, its static pods and etcd running): booted again, its
	// agent carries the reset out.
	must(t, c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName}}))
	resetting, cancelWait := context.WithTimeout(ctx, realNodesWait)
	defer cancelWait()
	must(t, awaitHostResetting(resetting, cpHost))
	must(t, cpHost.PowerCut())
	t.Logf("host %s: power cut during its reset; booting it again", cpHost.Name)
	must(t, cpHost.PowerOn(ctx))
	realEventually(t, "every host reset and Available after the cluster is gone", func() error {
		for _, h := range hosts {
			if err := hostPhase(ctx, c, ns, h.Name, infrav1.HostAvailable); err != nil {
				return err
			}
			if err := hostClean(h); err != nil {
				return err
			}
		}
		return nil
	})
}

// liveWorker is the one worker Machine not being deleted.
func liveWorker(ctx context.Context, c client.Client, ns string) (*clusterv1.Machine, error) {
	l := &clusterv1.MachineList{}
	if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: clusterName + "-md-0"}); err != nil {
		return nil, err
	}
	var live []*clusterv1.Machine
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp.IsZero() {
			live = append(live, &l.Items[i])
		}
	}
	if len(live) != 1 {
		return nil, fmt.Errorf("%d live worker Machines of %d", len(live), len(l.Items))
	}
	return live[0], nil
}

// hostOf is the host a Machine's EdgeMachine holds.
func hostOf(ctx context.Context, c client.Client, ns string, m *clusterv1.Machine) (string, error) {
	em := &infrav1.EdgeMachine{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.Spec.InfrastructureRef.Name}, em); err != nil {
		return "", err
	}
	if em.Status.HostRef == "" {
		return "", fmt.Errorf("EdgeMachine %s holds no host yet", em.Name)
	}
	return em.Status.HostRef, nil
}

func conditionsLine(m *clusterv1.Machine) string {
	var parts []string
	for _, c := range m.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, strings.ReplaceAll(c.Message, "\n", " ")))
		}
	}
	return strings.Join(parts, "; ")
}

// fleetCLI runs the real kubectl-fleet binary against the hub.
type fleetCLI struct{ bin, kubeconfig string }

func newFleetCLI(t *testing.T) fleetCLI {
	t.Helper()
	dir := t.TempDir()
	hubKC := filepath.Join(dir, "hub.kubeconfig")
	must(t, os.WriteFile(hubKC, kubeconfig.FromEnvTestConfig(hub.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}), 0o600))
	return fleetCLI{bin: build(t, dir, "./cmd/kubectl-fleet", "kubectl-fleet"), kubeconfig: hubKC}
}

func (f fleetCLI) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(f.bin, append(args, "--kubeconfig", f.kubeconfig)...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("kubectl fleet %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
