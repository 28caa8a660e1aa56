package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Three fleet-hub processes share one fleet, as a Deployment's replicas
// do: leader election runs the reconcilers on one, every replica serves
// the agents that dial it, and an edge-reach CONNECT landing on any replica
// reaches the cluster, forwarded to the replica holding its agents at the
// address that replica records in their EdgeHosts' status (no DNS name).
// The leader, which also holds the cluster's agents, is killed: the
// reconcilers resume on another replica (a new Machine is provisioned),
// its agents are back on the others with no bootstrap run again and no
// host ever marked disconnected, and Cluster API still reaches the cluster.
func TestHubReplicasShareTheFleet(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	bin := build(t, t.TempDir(), "./cmd/fleet-hub", "fleet-hub")
	kc := filepath.Join(t.TempDir(), "hub.kubeconfig")
	must(t, hub.WriteKubeconfig(kc))
	addrs := func() (gw, proxy string) { return freeAddr(t), freeAddr(t) }
	ga, pa := addrs()
	gb, pb := addrs()
	gc, pc := addrs()
	// Cluster API reaches the proxies through one address, as through the
	// proxy's Service.
	proxyLB := testkit.NewForwarder(t, pa, pb, pc)
	a := startReplica(t, bin, kc, ns, "hub-a", ga, pa, proxyLB.Addr())
	eventually(t, "hub-a leads", func() error { return a.leads() })
	b := startReplica(t, bin, kc, ns, "hub-b", gb, pb, proxyLB.Addr())
	cr := startReplica(t, bin, kc, ns, "hub-c", gc, pc, proxyLB.Addr())
	replicas := []*replica{a, b, cr}

	// The cluster's endpoint is the workload API server's address, which
	// the agents dial for edge reach.
	wl, err := url.Parse(workload.Config.Host)
	must(t, err)
	host, portStr, err := net.SplitHostPort(wl.Host)
	must(t, err)
	var port int32
	_, err = fmt.Sscan(portStr, &port)
	must(t, err)
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: clusterName}},
	}
	must(t, c.Create(ctx, cluster))
	wkc := kubeconfig.FromEnvTestConfig(workload.Config, cluster)
	must(t, c.Create(ctx, kubeconfig.GenerateSecret(cluster, wkc)))
	must(t, c.Create(ctx, &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: clusterName, Namespace: ns},
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: infrav1.APIEndpoint{Host: host, Port: port}}}))
	target := wl.Host

	cpToken, wToken := roleTokens(t, ns)
	agentBin, simBin := buildBinaries(t)
	pin := a.pin(t, ns)
	// Each agent dials its own load balancer: the cluster's two on hub-a
	// first, the spare on hub-b; hub-c holds none of the cluster's.
	lb := func(order ...string) string { return "https://" + testkit.NewForwarder(t, order...).Addr() }
	agents := []*agentProc{
		startAgent(t, "rp-cp-0", agentBin, simBin, lb(ga, gb, gc), pin, cpToken, wkc),
		startAgent(t, "rp-w-0", agentBin, simBin, lb(ga, gb, gc), pin, wToken, wkc),
	}
	eventually(t, "2 hosts Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 2) })
	createCPMachine(t, c, ns, "cp-0", nil)
	eventually(t, "the control plane Running through edge reach", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	createWorkerMachine(t, c, ns, "worker-a", nil)
	eventually(t, "2 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 2) })
	// The spare comes once the cluster's hosts are claimed.
	spare := startAgent(t, "rp-spare", agentBin, simBin, lb(gb, gc, ga), pin, wToken, wkc)
	eventually(t, "the spare Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 1) })
	eventually(t, "the cluster's hosts on hub-a, the spare on hub-b", func() error {
		return onReplicas(ctx, ns, map[string]string{"rp-cp-0": "hub-a", "rp-w-0": "hub-a", "rp-spare": "hub-b"})
	})
	user, password := credentialsOf(t, ns)
	for _, r := range replicas {
		if code, body := proxyRequest(t, r.proxy, http.MethodConnect, target, user, password); code != http.StatusOK {
			t.Fatalf("CONNECT through %s: %d %s", r.name, code, body)
		}
	}

	// The leader, which holds the cluster's agents, dies.
	since := logOffsets(agents)
	before := connectedSince(ctx, t, ns)
	a.kill()
	eventually(t, "another replica leads", func() error {
		for _, r := range []*replica{b, cr} {
			if r.leads() == nil {
				return nil
			}
		}
		return errors.New("no new leader yet")
	})
	eventually(t, "hub-a's agents back on the others", func() error {
		return onReplicas(ctx, ns, map[string]string{"rp-cp-0": "hub-b", "rp-w-0": "hub-b", "rp-spare": "hub-b"})
	})
	createWorkerMachine(t, c, ns, "worker-b", nil)
	eventually(t, "a new Machine Running: the reconcilers resumed", func() error { return testenv.MachinesRunning(ctx, c, ns, 3) })
	for _, r := range []*replica{b, cr} {
		if code, body := proxyRequest(t, r.proxy, http.MethodConnect, target, user, password); code != http.StatusOK {
			t.Fatalf("CONNECT through %s after the fail-over: %d %s", r.name, code, body)
		}
	}
	after := connectedSince(ctx, t, ns)
	for name, at := range before {
		if !after[name].Time.Equal(at.Time) {
			t.Errorf("host %s was marked disconnected meanwhile (AgentConnected changed at %s)", name, after[name])
		}
	}
	untouched(t, agents, since, map[string]string{"rp-cp-0": "cp-0", "rp-w-0": "worker-a"})
	if !strings.Contains(spare.log.String(), `"machine":"worker-b"`) {
		t.Errorf("the new Machine was not provisioned on the spare:\n%s", tail(spare.log.String(), 3000))
	}
}

// onReplicas checks which replica holds each host's session.
func onReplicas(ctx context.Context, ns string, want map[string]string) error {
	hosts := &infrav1.EdgeHostList{}
	if err := hub.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, h := range hosts.Items {
		if !conditions.IsTrue(&h, infrav1.AgentConnectedCondition) || h.Status.HubReplica != want[h.Name] {
			return fmt.Errorf("host %s on %q (proxy %q), want %q", h.Name, h.Status.HubReplica, h.Status.HubReplicaProxy, want[h.Name])
		}
	}
	return nil
}

// connectedSince is when each host's AgentConnected last changed.
func connectedSince(ctx context.Context, t *testing.T, ns string) map[string]metav1.Time {
	t.Helper()
	hosts := &infrav1.EdgeHostList{}
	must(t, hub.Client.List(ctx, hosts, client.InNamespace(ns)))
	out := map[string]metav1.Time{}
	for _, h := range hosts.Items {
		if cond := conditions.Get(&h, infrav1.AgentConnectedCondition); cond != nil {
			out[h.Name] = cond.LastTransitionTime
		}
	}
	return out
}

// replica is one fleet-hub process.
type replica struct {
	name, gateway, proxy, probe string
	cmd                         *exec.Cmd
	log                         *syncBuffer
}

// startReplica runs fleet-hub as the Deployment does, on its own
// addresses, watching only ns, and waits until it is ready.
func startReplica(t *testing.T, bin, kubeconfigPath, ns, name, gatewayAddr, proxy, proxyURL string) *replica {
	t.Helper()
	r := &replica{name: name, gateway: gatewayAddr, proxy: proxy, probe: freeAddr(t), log: &syncBuffer{}}
	r.cmd = exec.Command(bin, "--kubeconfig", kubeconfigPath, "--namespace", ns, "--hub-namespace", ns,
		"--leader-elect=true", "--leader-election-namespace", ns,
		"--leader-elect-lease-duration=6s", "--leader-elect-renew-deadline=4s", "--leader-elect-retry-period=1s",
		"--metrics-bind-address=0", "--health-probe-bind-address="+r.probe,
		"--gateway-bind-address="+gatewayAddr, "--gateway-ips=127.0.0.1",
		"--proxy-bind-address="+proxy, "--proxy-peer-address="+proxy, "--proxy-advertise-url=http://"+proxyURL,
		// Each replica serves the in-place hooks on a port of its own; no
		// ExtensionConfig is registered (no Service in this test).
		"--runtime-extension-bind-address=127.0.0.1:0", "--runtime-extension-service=",
		"--host-access-bind-address=127.0.0.1:0", "--host-access-service=",
		"--zap-log-level=info")
	r.cmd.Env = append(r.cmd.Environ(), "POD_NAME="+name)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	must(t, r.cmd.Start())
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, tail(r.log.String(), 6000))
		}
	})
	eventually(t, name+" ready", func() error {
		resp, err := http.Get("http://" + r.probe + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
	return r
}

// leads tells whether this replica holds the leader-election Lease, by its
// log (every replica here has the same hostname, which the Lease names).
func (r *replica) leads() error {
	if r.cmd.ProcessState == nil && strings.Contains(r.log.String(), "Successfully acquired lease") {
		return nil
	}
	return fmt.Errorf("%s does not lead", r.name)
}

// pin is the hub CA's pin, from the ConfigMap the gateway publishes.
func (r *replica) pin(t *testing.T, ns string) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	eventually(t, "the hub's CA pin published", func() error {
		if err := hub.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: hubinfo.ConfigMap}, cm); err != nil {
			return err
		}
		if cm.Data[hubinfo.KeyCAPin] == "" {
			return errors.New("no pin yet")
		}
		return nil
	})
	return cm.Data[hubinfo.KeyCAPin]
}

func (r *replica) kill() {
	if r.cmd.Process == nil || r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	_ = r.cmd.Wait()
}
