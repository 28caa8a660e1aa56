package e2e

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Real hosts that cannot become nodes — no container runtime, no kubelet,
// a port taken, an image missing, a kubelet that never gets healthy, the
// power cut in the middle of kubeadm init — each
// end NeedsAttention with kubeadm's own words on the EdgeMachine, the
// Machine and an Event, never a Running Machine; deleting the cluster
// resets each for real and gives it back clean.
func TestRealNodesBootstrapFailures(t *testing.T) {
	bin := realKit(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	const lan = "10.97.1"
	gw, _ := startFleetHubWithReach(t, ns, lan+".1")
	site, hubURL := startRealSite(t, "rf", lan, gw)
	prefix := fmt.Sprintf("rf%d", os.Getpid()%100000)

	type failure struct {
		name    string
		host    testhost.HostOptions
		setup   func(t *testing.T, h *testhost.Host)
		kubeadm func(s *bootstrapv1.KubeadmConfigSpec)
		// want is what kubeadm says, found in the EdgeMachine's condition.
		want string
		// cause checks the host for the cause, where kubeadm's words do
		// not name it.
		cause func(h *testhost.Host) error
		// during does something to the host while its bootstrap runs.
		during func(t *testing.T, h *testhost.Host)
		// event is what the ProvisioningFailed Event says; default
		// kubeadm's "error execution phase".
		event string
	}
	failures := []failure{
		{name: "nocri", host: testhost.HostOptions{Without: []string{"containerd"}}, want: "[ERROR CRI]"},
		{name: "nokubelet", host: testhost.HostOptions{Without: []string{"kubelet"}}, want: "[ERROR KubeletVersion]"},
		{name: "busy", want: "[ERROR Port-6443]", setup: func(t *testing.T, h *testhost.Host) {
			// Something else already serves the API server's port.
			var ln net.Listener
			must(t, h.Inside(func() (err error) { ln, err = net.Listen("tcp", ":6443"); return err }))
			t.Cleanup(func() { _ = ln.Close() })
		}},
		{name: "noimage", host: testhost.HostOptions{WithoutImages: []string{"etcd.tar"}}, want: "error execution phase wait-control-plane",
			cause: func(h *testhost.Host) error {
				// The kubelet ran the control plane's containers but for etcd's.
				out, err := h.Command(context.Background(), "ctr", "-n", "k8s.io", "containers", "ls").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "registry.k8s.io/kube-apiserver:") || strings.Contains(string(out), "registry.k8s.io/etcd:") {
					return fmt.Errorf("the host's containers (%v):\n%s", err, out)
				}
				return nil
			},
			kubeadm: func(s *bootstrapv1.KubeadmConfigSpec) {
				s.InitConfiguration.Timeouts.ControlPlaneComponentHealthCheckSeconds = ptr.To[int32](30)
			}},
		{name: "sick", want: "error execution phase wait-control-plane", cause: kubeletLogSays("has some missing paths"),
			kubeadm: func(s *bootstrapv1.KubeadmConfigSpec) {
				// A cgroup parent that does not exist: the kubelet exits at start.
				s.Files[0].Content = strings.Replace(s.Files[0].Content, "failCgroupV1: false\n", "failCgroupV1: false\ncgroupRoot: /missing\n", 1)
				s.InitConfiguration.Timeouts.KubeletHealthCheckSeconds = ptr.To[int32](20)
			}},
		// The power goes in the middle of kubeadm init, once it has written
		// the control plane's manifests: booted again, the agent never runs
		// the bootstrap a second time (it cannot know how far it got).
		{name: "powercut", want: "fleet-agent restarted during the bootstrap at step runcmd", event: "restarted during the bootstrap",
			during: func(t *testing.T, h *testhost.Host) {
				wait, cancel := context.WithTimeout(context.Background(), realNodesWait)
				defer cancel()
				must(t, awaitFile(wait, h, "etc/kubernetes/manifests/kube-apiserver.yaml"))
				must(t, h.PowerCut())
				t.Logf("host %s: power cut during kubeadm init; booting it again", h.Name)
				must(t, h.PowerOn(context.Background()))
			}},
	}
	hosts := map[string]*testhost.Host{}
	for _, f := range failures {
		token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns, HostLabels: map[string]string{"fail": f.name}}, time.Now())
		must(t, err)
		h := startRealHostWith(t, site, bin, f.host, prefix+"-"+f.name, hubURL, gw.CA().Pin(), token)
		if f.setup != nil {
			f.setup(t, h)
		}
		hosts[f.name] = h
	}
	realEventually(t, "the hosts enrolled and Available", func() error { return testenv.HostsAvailable(ctx, c, ns, len(failures)) })

	for _, f := range failures {
		settings := testHostsKubeadm(t)
		if f.kubeadm != nil {
			f.kubeadm(&settings)
		}
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"fail": f.name}}
		for _, o := range clustertemplate.Objects(clustertemplate.Spec{Name: f.name, Namespace: ns, KubernetesVersion: "v1.36.3",
			ControlPlane: "machines", ControlPlaneMachines: 1, ControlPlaneSelector: sel, WorkerSelector: sel,
			Endpoint: infrav1.APIEndpoint{Host: f.name + "." + ns + "." + infrav1.EndpointDomain, Port: 6443}, Kubeadm: settings}) {
			must(t, c.Create(ctx, o))
		}
	}
	for _, f := range failures {
		if f.during != nil {
			f.during(t, hosts[f.name])
		}
	}
	for _, f := range failures {
		machine := f.name + "-control-plane-0"
		realEventually(t, f.name+": the host NeedsAttention with kubeadm's words", func() error {
			if err := hostPhase(ctx, c, ns, hosts[f.name].Name, infrav1.HostNeedsAttention); err != nil {
				return err
			}
			cond, err := hostCondition(ctx, c, ns, machine, infrav1.HostProvisionedCondition)
			if err != nil {
				return err
			}
			if cond.Reason != infrav1.ProvisioningFailedReason || !strings.Contains(cond.Message, f.want) {
				return fmt.Errorf("HostProvisioned %s: %s", cond.Reason, cond.Message)
			}
			return nil
		})
		// Cluster API's Machine says it too, as `kubectl get machine` and
		// `kubectl fleet describe` show it.
		realEventually(t, f.name+": the Machine's InfrastructureReady has kubeadm's words", func() error {
			m := &clusterv1.Machine{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, m); err != nil {
				return err
			}
			cond := conditions.Get(m, clusterv1.MachineInfrastructureReadyCondition)
			if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, f.want) {
				return fmt.Errorf("Machine InfrastructureReady %+v", cond)
			}
			return nil
		})
		// And so does its Event, cut to what the events API takes.
		realEventually(t, f.name+": a ProvisioningFailed Event with kubeadm's last words", func() error {
			e, err := eventOn(ctx, ns, "EdgeMachine", machine, infrav1.ProvisioningFailedReason)
			if err != nil {
				return err
			}
			if want := cmp.Or(f.event, "error execution phase"); !strings.Contains(e.Note, want) {
				return fmt.Errorf("event: %s", e.Note)
			}
			return nil
		})
		if f.cause != nil {
			realEventually(t, f.name+": the cause seen on the host", func() error { return f.cause(hosts[f.name]) })
		}
	}
	// Long after, none went Running.
	for _, f := range failures {
		m := &clusterv1.Machine{}
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: f.name + "-control-plane-0"}, m))
		if m.Status.Phase == string(clusterv1.MachinePhaseRunning) {
			t.Errorf("%s: a Machine whose bootstrap failed went Running", f.name)
		}
	}

	// The operator gives up on them: each host is reset for real and
	// comes back clean.
	for _, f := range failures {
		must(t, c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: f.name}}))
	}
	for _, f := range failures {
		h := hosts[f.name]
		realEventually(t, f.name+": the host reset and Available", func() error {
			if err := hostPhase(ctx, c, ns, h.Name, infrav1.HostAvailable); err != nil {
				return err
			}
			if f.name == "nocri" {
				return hostFilesClean(h) // no runtime to ask about containers
			}
			return hostClean(h)
		})
	}
}

// kubeletLogSays checks the host's kubelet log for s.
func kubeletLogSays(s string) func(h *testhost.Host) error {
	return func(h *testhost.Host) error {
		if log := h.UnitLog("kubelet.service"); !strings.Contains(log, s) {
			return fmt.Errorf("the kubelet's log does not say %q:\n%s", s, log)
		}
		return nil
	}
}
