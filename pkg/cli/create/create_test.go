package create

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/command"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	valid := func() *Options {
		return &Options{KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm", ControlPlaneMachines: 1, DryRun: "none",
			PodCIDR: "192.168.0.0/16", Endpoint: "store.hosts.fleet.internal:6443", Timeout: time.Minute,
			spec: Spec{Name: "store", Namespace: "hosts"}}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"bad name", func(o *Options) { o.spec.Name = "Bad_Name" }, `invalid cluster name "Bad_Name": a lowercase RFC 1123 label`},
		{"version", func(o *Options) { o.KubernetesVersion = "1.36" }, "vMAJOR.MINOR.PATCH"},
		{"control plane kind", func(o *Options) { o.ControlPlane = "k3s" }, "want kubeadm or machines"},
		{"even control plane", func(o *Options) { o.ControlPlaneMachines = 2 }, "odd number"},
		{"negative workers", func(o *Options) { o.WorkerMachines = -1 }, "--worker-machines must not be negative"},
		{"selector", func(o *Options) { o.HostSelector = []string{"site in (a,b"} }, `invalid --host-selector/--control-plane-host-selector "site in (a,b"`},
		{"worker selector", func(o *Options) { o.WorkerSelector = []string{"rack in (r1"} }, `invalid --host-selector/--worker-host-selector`},
		{"endpoint", func(o *Options) { o.Endpoint = "store" }, "want host:port"},
		{"endpoint port", func(o *Options) { o.Endpoint = "store:70000" }, "bad port"},
		{"pod cidr", func(o *Options) { o.PodCIDR = "10.0.0.0" }, `--pod-cidr "10.0.0.0"`},
		{"service cidr", func(o *Options) { o.ServiceCIDR = "nope" }, `--service-cidr "nope"`},
		{"dry run", func(o *Options) { o.DryRun = "server" }, "want none or client"},
		{"-o without dry run", func(o *Options) { o.Output = "yaml" }, "-o is for --dry-run=client"},
		{"-o format", func(o *Options) { o.DryRun, o.Output = "client", "wide" }, `-o "wide": want yaml or json`},
		{"wait without time", func(o *Options) { o.Wait, o.Timeout = true, 0 }, "--timeout 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.change(o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// The common selector and each role's own combine, in full selector syntax.
func TestValidateParsesSelectors(t *testing.T) {
	o := &Options{KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm", ControlPlaneMachines: 1, DryRun: "none",
		Endpoint: "s:6443", spec: Spec{Name: "s"},
		HostSelector: []string{"site in (a,b)"}, WorkerSelector: []string{"!fleet.edgefleet.io/interruptible"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cp, w := o.spec.ControlPlaneSelector, o.spec.WorkerSelector
	if len(cp.MatchExpressions) != 1 || cp.MatchExpressions[0].Key != "site" || strings.Join(cp.MatchExpressions[0].Values, ",") != "a,b" {
		t.Errorf("control-plane selector %v", cp)
	}
	if len(w.MatchExpressions) != 2 || w.MatchExpressions[1].Operator != "DoesNotExist" {
		t.Errorf("worker selector %v", w)
	}
}

// validOptions are the flags' defaults for a cluster with one worker,
// printed rather than applied.
func validOptions() *Options {
	return &Options{flags: genericclioptions.NewConfigFlags(false), KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm",
		ControlPlaneMachines: 1, WorkerMachines: 1, PodCIDR: "192.168.0.0/16", DryRun: "client", Output: "yaml"}
}

// objects runs o as the command does, up to the objects it would print.
func objects(t *testing.T, o *Options) []client.Object {
	t.Helper()
	if err := o.Complete([]string{"store"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return Objects(o.spec)
}

// find returns the first object of type T among objs.
func find[T client.Object](t *testing.T, objs []client.Object) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.(T); ok {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T among the objects", zero)
	return zero
}

// The EdgeCluster offers the zones of the control-plane hosts, whatever the
// workers' selector: KCP places by failure domain, the MachineDeployment
// does not.
func TestEdgeClusterScopedToControlPlaneHosts(t *testing.T) {
	for _, tc := range []struct {
		name               string
		common, cp, worker []string
		want               string // FormatLabelSelector, "" for nil
	}{
		{"no selector: every host", nil, nil, nil, ""},
		{"common selector", []string{"site=store-17"}, nil, nil, "site=store-17"},
		{"roles differ: the control plane's", []string{"site=store-17"}, []string{"role=cp"}, []string{"role=worker"}, "role=cp,site=store-17"},
		{"only workers narrowed", []string{"site=store-17"}, nil, []string{"rack in (r1)"}, "site=store-17"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			o.HostSelector, o.ControlPlaneSelector, o.WorkerSelector = tc.common, tc.cp, tc.worker
			ec := find[*infrav1.EdgeCluster](t, objects(t, o))
			if tc.want == "" {
				if ec.Spec.HostSelector != nil {
					t.Fatalf("hostSelector %v, want none", ec.Spec.HostSelector)
				}
				return
			}
			if got := metav1.FormatLabelSelector(ec.Spec.HostSelector); got != tc.want {
				t.Fatalf("hostSelector %q, want %q", got, tc.want)
			}
			if ec.Spec.HostSelector == o.spec.ControlPlaneSelector {
				t.Error("EdgeCluster shares the selector with the Spec")
			}
		})
	}
}
