package create

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	valid := func() *Options {
		return &Options{KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm", ControlPlaneMachines: 1, DryRun: "none",
			PodCIDR: "192.168.0.0/16", Endpoint: "store.hosts.fleet.internal:6443", Timeout: time.Minute,
			spec: clustertemplate.Spec{Name: "store", Namespace: "hosts"}}
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
		Endpoint: "s:6443", spec: clustertemplate.Spec{Name: "s"},
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
	return &Options{flags: kube.NewConfigFlags(), KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm",
		ControlPlaneMachines: 1, WorkerMachines: 1, PodCIDR: "192.168.0.0/16", DryRun: "client", Output: "yaml"}
}

// objects runs o as the command does, up to the objects it would print.
func objects(t *testing.T, o *Options) []clustertemplate.Object {
	t.Helper()
	if err := o.Complete([]string{"store"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return clustertemplate.Objects(o.spec)
}

// find returns the first object of type T among objs.
func find[T clustertemplate.Object](t *testing.T, objs []clustertemplate.Object) T {
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

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeadm.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// wired checks create's node wiring is in nr, with the settings want kept.
func wired(t *testing.T, what string, nr bootstrapv1.NodeRegistrationOptions) {
	t.Helper()
	if nr.Name != clustertemplate.NodeNameTemplate {
		t.Errorf("%s: node name %q", what, nr.Name)
	}
	n := 0
	for _, a := range nr.KubeletExtraArgs {
		if a.Name == clustertemplate.ProviderIDArg {
			n++
			if ptr.Deref(a.Value, "") != clustertemplate.ProviderIDTemplate {
				t.Errorf("%s: provider-id %q", what, ptr.Deref(a.Value, ""))
			}
		}
	}
	if n != 1 {
		t.Errorf("%s: %d provider-id args in %v", what, n, nr.KubeletExtraArgs)
	}
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

// Without kubeadm settings create writes the node wiring and its API
// server flags (one control-plane machine: both), nothing else.
func TestNoKubeadmSettingsOnlyWiring(t *testing.T) {
	o := validOptions()
	objs := objects(t, o)
	nr := bootstrapv1.NodeRegistrationOptions{Name: clustertemplate.NodeNameTemplate,
		KubeletExtraArgs: []bootstrapv1.Arg{{Name: clustertemplate.ProviderIDArg, Value: ptr.To(clustertemplate.ProviderIDTemplate)}}}
	want := bootstrapv1.KubeadmConfigSpec{InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nr},
		JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nr}}
	want.ClusterConfiguration.APIServer.ExtraArgs = []bootstrapv1.Arg{
		{Name: clustertemplate.ShutdownWatchGraceArg, Value: ptr.To(clustertemplate.ShutdownWatchGraceValue)},
		{Name: clustertemplate.RequestTimeoutArg, Value: ptr.To(clustertemplate.RequestTimeoutOneHostValue)}}
	if got := find[*controlplanev1.KubeadmControlPlane](t, objs).Spec.KubeadmConfigSpec; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("KCP kubeadmConfigSpec %+v", got)
	}
	want = bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nr}}
	if got := find[*bootstrapv1.KubeadmConfigTemplate](t, objs).Spec.Template.Spec; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("KubeadmConfigTemplate spec %+v", got)
	}
}

const userKubeadm = `
clusterConfiguration:
  apiServer:
    certSANs: [api.store-17.example]
initConfiguration:
  nodeRegistration:
    criSocket: unix:///run/containerd/containerd.sock
    kubeletExtraArgs:
    - {name: node-ip, value: 10.0.0.5}
    taints: []
  localAPIEndpoint: {advertiseAddress: 10.0.0.5}
joinConfiguration:
  nodeRegistration:
    name: '{{ ds.meta_data.local_hostname }}'
    kubeletExtraArgs:
    - {name: provider-id, value: '{{ ds.meta_data.provider_id }}'}
    - {name: max-pods, value: "50"}
  controlPlane:
    localAPIEndpoint: {bindPort: 6443}
preKubeadmCommands: [echo one, echo two]
files:
- {path: /etc/motd, content: hello}
`

// create's API server flags: the shutdown grace on every control plane, the
// request timeout on a control plane of one machine only; a value the
// user's file gives is kept as it is.
func TestAPIServerDefaultArgs(t *testing.T) {
	const own = "clusterConfiguration:\n  apiServer:\n    extraArgs:\n" +
		"    - {name: shutdown-watch-termination-grace-period, value: 20s}\n    - {name: request-timeout, value: 1m}\n"
	grace, timeout := clustertemplate.ShutdownWatchGraceArg, clustertemplate.RequestTimeoutArg
	for _, tc := range []struct {
		name          string
		controlPlanes int32
		file          string
		want          map[string]string
	}{
		{"one host", 1, "", map[string]string{grace: clustertemplate.ShutdownWatchGraceValue, timeout: clustertemplate.RequestTimeoutOneHostValue}},
		{"three control planes", 3, "", map[string]string{grace: clustertemplate.ShutdownWatchGraceValue}},
		{"the file's own", 1, own, map[string]string{grace: "20s", timeout: "1m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			o.ControlPlaneMachines = tc.controlPlanes
			if tc.file != "" {
				o.KubeadmConfig = writeFile(t, tc.file)
			}
			got := map[string]string{}
			for _, a := range find[*controlplanev1.KubeadmControlPlane](t, objects(t, o)).Spec.KubeadmConfigSpec.ClusterConfiguration.APIServer.ExtraArgs {
				if _, dup := got[a.Name]; dup {
					t.Errorf("apiServer.extraArgs has %s twice", a.Name)
				}
				got[a.Name] = ptr.Deref(a.Value, "")
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("apiServer.extraArgs %v, want %v", got, tc.want)
			}
		})
	}
}

// The file's settings reach every machine's bootstrap config, its other
// nodeRegistration fields kept beside create's wiring; workers get only
// what a join uses.
func TestKubeadmConfigFile(t *testing.T) {
	o := validOptions()
	o.KubeadmConfig = writeFile(t, userKubeadm)
	objs := objects(t, o)
	kcp := find[*controlplanev1.KubeadmControlPlane](t, objs).Spec.KubeadmConfigSpec
	wired(t, "KCP init", kcp.InitConfiguration.NodeRegistration)
	wired(t, "KCP join", kcp.JoinConfiguration.NodeRegistration)
	init := kcp.InitConfiguration.NodeRegistration
	if init.CRISocket != "unix:///run/containerd/containerd.sock" || init.Taints == nil || len(*init.Taints) != 0 ||
		len(init.KubeletExtraArgs) != 2 || init.KubeletExtraArgs[0].Name != "node-ip" {
		t.Errorf("KCP init nodeRegistration lost the file's settings: %+v", init)
	}
	if args := kcp.JoinConfiguration.NodeRegistration.KubeletExtraArgs; len(args) != 2 || args[1].Name != "max-pods" {
		t.Errorf("KCP join kubeletExtraArgs %v", args)
	}
	if kcp.InitConfiguration.LocalAPIEndpoint.AdvertiseAddress != "10.0.0.5" || kcp.JoinConfiguration.ControlPlane == nil ||
		strings.Join(kcp.ClusterConfiguration.APIServer.CertSANs, ",") != "api.store-17.example" ||
		strings.Join(kcp.PreKubeadmCommands, ",") != "echo one,echo two" || len(kcp.Files) != 1 {
		t.Errorf("KCP kubeadmConfigSpec %+v", kcp)
	}

	w := find[*bootstrapv1.KubeadmConfigTemplate](t, objs).Spec.Template.Spec
	wired(t, "worker join", w.JoinConfiguration.NodeRegistration)
	if w.InitConfiguration.IsDefined() || w.ClusterConfiguration.IsDefined() || w.JoinConfiguration.ControlPlane != nil {
		t.Errorf("worker config carries control-plane settings: %+v", w)
	}
	if len(w.JoinConfiguration.NodeRegistration.KubeletExtraArgs) != 2 || len(w.Files) != 1 || len(w.PreKubeadmCommands) != 2 {
		t.Errorf("worker config lost the file's settings: %+v", w)
	}

	// The plain-Machines control plane: the first inits, the others join
	// as control plane, each with the file's settings.
	o.ControlPlane, o.ControlPlaneMachines = "machines", 3
	var configs []bootstrapv1.KubeadmConfigSpec
	for _, obj := range objects(t, o) {
		if c, ok := obj.(*bootstrapv1.KubeadmConfig); ok {
			configs = append(configs, c.Spec)
		}
	}
	if len(configs) != 3 {
		t.Fatalf("%d KubeadmConfigs", len(configs))
	}
	wired(t, "first machine", configs[0].InitConfiguration.NodeRegistration)
	if configs[0].JoinConfiguration.IsDefined() || len(configs[0].Files) != 1 {
		t.Errorf("first machine's config %+v", configs[0])
	}
	for _, c := range configs[1:] {
		wired(t, "joining machine", c.JoinConfiguration.NodeRegistration)
		if c.InitConfiguration.IsDefined() || c.JoinConfiguration.ControlPlane == nil || c.JoinConfiguration.ControlPlane.LocalAPIEndpoint.BindPort != 6443 {
			t.Errorf("joining machine's config %+v", c)
		}
	}
}

// The flags add to the file's lists and replace its pull policy.
func TestKubeadmFlags(t *testing.T) {
	o := validOptions()
	o.KubeadmConfig = writeFile(t, `
initConfiguration:
  nodeRegistration: {imagePullPolicy: Always, ignorePreflightErrors: [Swap]}
  skipPhases: [addon/coredns]
joinConfiguration:
  nodeRegistration: {ignorePreflightErrors: [Swap]}
`)
	o.IgnorePreflightErrors = []string{"swap", "SystemVerification"}
	o.ImagePullPolicy = "Never"
	o.SkipInitPhases = []string{"addon/kube-proxy", "addon/coredns"}
	objs := objects(t, o)
	kcp := find[*controlplanev1.KubeadmControlPlane](t, objs).Spec.KubeadmConfigSpec
	w := find[*bootstrapv1.KubeadmConfigTemplate](t, objs).Spec.Template.Spec
	for what, nr := range map[string]bootstrapv1.NodeRegistrationOptions{"KCP init": kcp.InitConfiguration.NodeRegistration,
		"KCP join": kcp.JoinConfiguration.NodeRegistration, "worker join": w.JoinConfiguration.NodeRegistration} {
		if got := strings.Join(nr.IgnorePreflightErrors, ","); got != "Swap,SystemVerification" {
			t.Errorf("%s ignorePreflightErrors %s", what, got)
		}
		if nr.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s imagePullPolicy %s", what, nr.ImagePullPolicy)
		}
		wired(t, what, nr)
	}
	if got := strings.Join(kcp.InitConfiguration.SkipPhases, ","); got != "addon/coredns,addon/kube-proxy" {
		t.Errorf("init skipPhases %s", got)
	}
	if kcp.JoinConfiguration.SkipPhases != nil || w.JoinConfiguration.SkipPhases != nil {
		t.Error("init phases reached a join")
	}

	// The flags alone, without a file.
	o = validOptions()
	o.IgnorePreflightErrors, o.ImagePullPolicy = []string{"NumCPU"}, "IfNotPresent"
	w = find[*bootstrapv1.KubeadmConfigTemplate](t, objects(t, o)).Spec.Template.Spec
	if w.JoinConfiguration.NodeRegistration.ImagePullPolicy != corev1.PullIfNotPresent ||
		strings.Join(w.JoinConfiguration.NodeRegistration.IgnorePreflightErrors, ",") != "NumCPU" {
		t.Errorf("worker join %+v", w.JoinConfiguration.NodeRegistration)
	}
}

func TestKubeadmConfigFromStdin(t *testing.T) {
	o := validOptions()
	o.KubeadmConfig = "-"
	o.In = strings.NewReader("initConfiguration: {skipPhases: [addon/coredns]}\n")
	objects(t, o)
	if got := o.spec.Kubeadm.InitConfiguration.SkipPhases; len(got) != 1 || got[0] != "addon/coredns" {
		t.Errorf("skipPhases %v", got)
	}
}

// Every mistake is found by Validate, naming the field or flag, so nothing
// is written.
func TestKubeadmConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		file   string // "" for no file
		change func(*Options)
		want   string
	}{
		{"unknown field", "initConfiguration:\n  nodeRegistration:\n    imagePulPolicy: Never\n", nil,
			`unknown field "initConfiguration.nodeRegistration.imagePulPolicy"`},
		{"unknown field in a list", "files:\n- path: /x\n  contnt: y\n", nil, `unknown field "files[0].contnt"`},
		{"kind and apiVersion are not spec fields", "apiVersion: bootstrap.cluster.x-k8s.io/v1beta2\nkind: KubeadmConfig\n", nil, `unknown field "apiVersion"`},
		{"repeated field", "files: []\nfiles: []\n", nil, `key "files" already set`},
		{"wrong type", "initConfiguration: 3\n", nil, "cannot unmarshal number"},
		{"not a mapping", "- a\n", nil, "cannot unmarshal array"},
		{"node name", "initConfiguration:\n  nodeRegistration: {name: node-1}\n", nil,
			`initConfiguration.nodeRegistration.name "node-1": create names each node after its host`},
		{"provider-id", "joinConfiguration:\n  nodeRegistration:\n    kubeletExtraArgs: [{name: provider-id, value: aws:///x}]\n", nil,
			`joinConfiguration.nodeRegistration.kubeletExtraArgs provider-id="aws:///x"`},
		{"ignition", "format: ignition\n", nil, `format "ignition": fleet-agent runs "cloud-config" bootstraps only`},
		{"hostname override", "initConfiguration:\n  nodeRegistration:\n    kubeletExtraArgs: [{name: hostname-override, value: x}]\n", nil,
			"initConfiguration.nodeRegistration.kubeletExtraArgs hostname-override: it renames the node"},
		{"pull policy in the file", "joinConfiguration:\n  nodeRegistration: {imagePullPolicy: Sometimes}\n", nil,
			`joinConfiguration.nodeRegistration.imagePullPolicy "Sometimes"`},
		{"pull policy flag", "", func(o *Options) { o.ImagePullPolicy = "never" }, `--image-pull-policy "never": want Always, IfNotPresent or Never`},
		{"empty preflight check", "", func(o *Options) { o.IgnorePreflightErrors = []string{"Swap", ""} }, `--ignore-preflight-errors ""`},
		{"phase name", "", func(o *Options) { o.SkipInitPhases = []string{"addon/"} }, `--skip-init-phases "addon/"`},
		{"phase name case", "", func(o *Options) { o.SkipInitPhases = []string{"Addon/CoreDNS"} }, `--skip-init-phases "Addon/CoreDNS"`},
		{"missing file", "", func(o *Options) { o.KubeadmConfig = "/nonexistent/kubeadm.yaml" }, "--kubeadm-config /nonexistent/kubeadm.yaml: open"},
		{"stdin without input", "", func(o *Options) { o.KubeadmConfig = "-" }, "--kubeadm-config -: no standard input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			if tc.file != "" {
				o.KubeadmConfig = writeFile(t, tc.file)
			}
			if tc.change != nil {
				tc.change(o)
			}
			if err := o.Complete([]string{"store"}); err != nil {
				t.Fatal(err)
			}
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// The documented template for the real-node test hosts, read as
// --kubeadm-config reads it, puts each of its settings where kubeadm takes
// it, for the control plane and the workers: the doc cannot drift from what
// create makes of it.
func TestTemplateForTestHosts(t *testing.T) {
	o := validOptions()
	o.KubeadmConfig = filepath.Join("..", "..", "..", "docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml")
	objs := objects(t, o)
	kcp := find[*controlplanev1.KubeadmControlPlane](t, objs).Spec.KubeadmConfigSpec
	w := find[*bootstrapv1.KubeadmConfigTemplate](t, objs).Spec.Template.Spec
	const patches = "/etc/kubernetes/patches"
	for what, nr := range map[string]bootstrapv1.NodeRegistrationOptions{"KCP init": kcp.InitConfiguration.NodeRegistration,
		"KCP join": kcp.JoinConfiguration.NodeRegistration, "worker join": w.JoinConfiguration.NodeRegistration} {
		wired(t, what, nr)
		if nr.ImagePullPolicy != corev1.PullNever {
			t.Errorf("%s imagePullPolicy %q", what, nr.ImagePullPolicy)
		}
		if !slices.Contains(nr.IgnorePreflightErrors, "SystemVerification") {
			t.Errorf("%s ignorePreflightErrors %v", what, nr.IgnorePreflightErrors)
		}
	}
	// The hosts have kube-proxy and CoreDNS images: kubeadm runs every addon.
	if got := kcp.InitConfiguration.SkipPhases; len(got) != 0 {
		t.Errorf("init skipPhases %v, want none", got)
	}
	if kcp.InitConfiguration.Patches.Directory != patches || kcp.JoinConfiguration.Patches.Directory != patches ||
		w.JoinConfiguration.Patches.Directory != patches {
		t.Errorf("patches directories: init %q, join %q, worker %q", kcp.InitConfiguration.Patches.Directory,
			kcp.JoinConfiguration.Patches.Directory, w.JoinConfiguration.Patches.Directory)
	}
	for what, files := range map[string][]bootstrapv1.File{"KCP": kcp.Files, "worker": w.Files} {
		i := slices.IndexFunc(files, func(f bootstrapv1.File) bool {
			return f.Path == patches+"/kubeletconfiguration+merge.yaml"
		})
		if i < 0 {
			t.Errorf("%s: no kubelet configuration patch in %v", what, files)
			continue
		}
		// The cgroup driver and root are the image's systemd's and the
		// box's cgroup namespace's; the disk is the machine's.
		if c := files[i].Content; !strings.HasPrefix(c, "failCgroupV1: false\n") || !strings.Contains(c, "imageGCHighThresholdPercent: 100\n") ||
			strings.Contains(c, "cgroupDriver") || strings.Contains(c, "cgroupRoot") {
			t.Errorf("%s: kubelet configuration patch %q, want failCgroupV1: false and the disk floors alone", what, c)
		}
		// kube-proxy's configuration reaches kubeadm init's config file.
		const proxyConfig = "/run/kubeadm/kube-proxy-configuration.yaml"
		i = slices.IndexFunc(files, func(f bootstrapv1.File) bool { return f.Path == proxyConfig })
		if i < 0 || !strings.Contains(files[i].Content, "kind: KubeProxyConfiguration\n") || !strings.Contains(files[i].Content, "  maxPerCore: 0\n") {
			t.Errorf("%s: no KubeProxyConfiguration with conntrack.maxPerCore 0 in %v", what, files)
		}
	}
	for what, cmds := range map[string][]string{"KCP": kcp.PreKubeadmCommands, "worker": w.PreKubeadmCommands} {
		if !slices.Contains(cmds, "cat /run/kubeadm/kube-proxy-configuration.yaml >> /run/kubeadm/kubeadm.yaml") {
			t.Errorf("%s preKubeadmCommands %q do not add the kube-proxy configuration to kubeadm's", what, cmds)
		}
	}
}

// healthChecksOf runs `create cluster` with args as a client-side dry run
// and returns the MachineHealthChecks it would write.
func healthChecksOf(t *testing.T, args ...string) []clusterv1.MachineHealthCheck {
	t.Helper()
	var out bytes.Buffer
	cmd := newClusterCmd(kube.NewConfigFlags(), genericiooptions.IOStreams{Out: &out, ErrOut: io.Discard})
	cmd.SetArgs(append([]string{"store", "--kubernetes-version", "v1.36.3", "--dry-run=client", "-o", "yaml"}, args...))
	cmd.SetOut(io.Discard)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var mhcs []clusterv1.MachineHealthCheck
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		if !strings.Contains(doc, "kind: MachineHealthCheck") {
			continue
		}
		var m clusterv1.MachineHealthCheck
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		mhcs = append(mhcs, m)
	}
	return mhcs
}

// The flags' defaults make a MachineHealthCheck for the KubeadmControlPlane
// and one for the workers, each selecting only its own Machines, with the
// Node, startup and host checks and Cluster API's short-circuit default.
func TestHealthChecksByDefault(t *testing.T) {
	mhcs := healthChecksOf(t, "--worker-machines", "1")
	if len(mhcs) != 2 {
		t.Fatalf("%d MachineHealthChecks, want 2", len(mhcs))
	}
	cp, w := mhcs[0], mhcs[1]
	if cp.Name != "store-control-plane" || len(cp.Spec.Selector.MatchLabels) != 1 || cp.Spec.Selector.MatchLabels[clusterv1.MachineControlPlaneLabel] != "" {
		t.Errorf("control-plane check %s selects %v", cp.Name, cp.Spec.Selector.MatchLabels)
	}
	if w.Name != "store-md-0" || w.Spec.Selector.MatchLabels[clusterv1.MachineDeploymentNameLabel] != "store-md-0" {
		t.Errorf("workers' check %s selects %v", w.Name, w.Spec.Selector.MatchLabels)
	}
	for _, m := range mhcs {
		c := m.Spec.Checks
		if m.Spec.ClusterName != "store" || ptr.Deref(c.NodeStartupTimeoutSeconds, -1) != 1200 {
			t.Errorf("%s: cluster %q, node startup %v", m.Name, m.Spec.ClusterName, c.NodeStartupTimeoutSeconds)
		}
		if len(c.UnhealthyNodeConditions) != 2 || c.UnhealthyNodeConditions[0].Type != corev1.NodeReady ||
			c.UnhealthyNodeConditions[0].Status != corev1.ConditionFalse || c.UnhealthyNodeConditions[1].Status != corev1.ConditionUnknown ||
			ptr.Deref(c.UnhealthyNodeConditions[1].TimeoutSeconds, 0) != 300 {
			t.Errorf("%s: node conditions %+v", m.Name, c.UnhealthyNodeConditions)
		}
		if len(c.UnhealthyMachineConditions) != 1 || c.UnhealthyMachineConditions[0].Type != clusterv1.MachineInfrastructureReadyCondition ||
			c.UnhealthyMachineConditions[0].Status != metav1.ConditionFalse || ptr.Deref(c.UnhealthyMachineConditions[0].TimeoutSeconds, 0) != 1800 {
			t.Errorf("%s: machine conditions %+v", m.Name, c.UnhealthyMachineConditions)
		}
		if got := m.Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo; got == nil || got.String() != "100%" {
			t.Errorf("%s: unhealthyLessThanOrEqualTo %v", m.Name, got)
		}
	}
}

// The flags tune every check, 0 turns one off, and --health-check=false
// writes none; plain control-plane Machines, which Cluster API cannot
// remediate, get none either.
func TestHealthCheckFlags(t *testing.T) {
	mhcs := healthChecksOf(t, "--node-startup-timeout", "0", "--unhealthy-timeout", "45s", "--host-unready-timeout", "0",
		"--max-unhealthy", "2", "--control-plane=machines")
	if len(mhcs) != 1 || mhcs[0].Name != "store-md-0" {
		t.Fatalf("MachineHealthChecks %v, want only the workers'", mhcs)
	}
	c := mhcs[0].Spec.Checks
	if ptr.Deref(c.NodeStartupTimeoutSeconds, -1) != 0 || len(c.UnhealthyMachineConditions) != 0 ||
		len(c.UnhealthyNodeConditions) != 2 || ptr.Deref(c.UnhealthyNodeConditions[0].TimeoutSeconds, 0) != 45 {
		t.Errorf("checks %+v", c)
	}
	if got := mhcs[0].Spec.Remediation.TriggerIf.UnhealthyLessThanOrEqualTo; got == nil || got.String() != "2" || got.Type != intstr.Int {
		t.Errorf("unhealthyLessThanOrEqualTo %v", got)
	}
	if mhcs := healthChecksOf(t, "--health-check=false"); len(mhcs) != 0 {
		t.Errorf("--health-check=false wrote %d MachineHealthChecks", len(mhcs))
	}
}

func TestHealthCheckFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.UnhealthyTimeout = -time.Second }, "--unhealthy-timeout -1s: want a duration ≥ 0"},
		{func(o *Options) { o.NodeStartupTimeout = 100 * 365 * 24 * time.Hour }, "--node-startup-timeout"},
		{func(o *Options) { o.MaxUnhealthy = "120%" }, `--max-unhealthy "120%": want a number of machines (2) or a percentage (40%)`},
		{func(o *Options) { o.MaxUnhealthy = "some" }, `--max-unhealthy "some"`},
	} {
		o := &Options{KubernetesVersion: "v1.36.3", ControlPlane: "kubeadm", ControlPlaneMachines: 1, DryRun: "none",
			Endpoint: "s:6443", spec: clustertemplate.Spec{Name: "s"}, HealthCheck: true, MaxUnhealthy: "100%"}
		tc.change(o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}

// The class variables for the test hosts carry the same settings as the
// kubeadm file for them, so both ways of making a cluster there work.
func TestTopologyVariablesForTestHosts(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "docs", "templates")
	data, err := os.ReadFile(filepath.Join(dir, "kubeadm-cgroupv1-test-hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := clustertemplate.ParseKubeadmConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	data, err = os.ReadFile(filepath.Join(dir, "topology-cgroupv1-test-hosts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vars struct {
		ImagePullPolicy         corev1.PullPolicy  `json:"imagePullPolicy"`
		IgnorePreflightErrors   []string           `json:"ignorePreflightErrors"`
		KubeadmPatchesDirectory string             `json:"kubeadmPatchesDirectory"`
		Files                   []bootstrapv1.File `json:"files"`
		PreKubeadmCommands      []string           `json:"preKubeadmCommands"`
	}
	if err := yaml.UnmarshalStrict(data, &vars); err != nil {
		t.Fatal(err)
	}
	for what, nr := range map[string]bootstrapv1.NodeRegistrationOptions{"init": spec.InitConfiguration.NodeRegistration, "join": spec.JoinConfiguration.NodeRegistration} {
		if nr.ImagePullPolicy != vars.ImagePullPolicy || !slices.Equal(nr.IgnorePreflightErrors, vars.IgnorePreflightErrors) {
			t.Errorf("%s: kubeadm file %q %v, variables %q %v", what, nr.ImagePullPolicy, nr.IgnorePreflightErrors, vars.ImagePullPolicy, vars.IgnorePreflightErrors)
		}
	}
	if spec.InitConfiguration.Patches.Directory != vars.KubeadmPatchesDirectory || spec.JoinConfiguration.Patches.Directory != vars.KubeadmPatchesDirectory {
		t.Errorf("patches directory: kubeadm file %q, variables %q", spec.InitConfiguration.Patches.Directory, vars.KubeadmPatchesDirectory)
	}
	if !reflect.DeepEqual(spec.Files, vars.Files) || !slices.Equal(spec.PreKubeadmCommands, vars.PreKubeadmCommands) {
		t.Errorf("files or preKubeadmCommands differ:\nkubeadm file %+v %v\nvariables %+v %v", spec.Files, spec.PreKubeadmCommands, vars.Files, vars.PreKubeadmCommands)
	}
}

// --certificates-expiry-days reaches the KubeadmControlPlane, the class's
// variable with --class, or the control-plane EdgeMachines (their agents
// renew in place) with --control-plane=machines; what KCP would refuse is
// refused first.
func TestCertificatesExpiryDays(t *testing.T) {
	o := validOptions()
	o.CertificatesExpiryDays = 30
	if got := find[*controlplanev1.KubeadmControlPlane](t, objects(t, o)).Spec.Rollout.Before.CertificatesExpiryDays; got != 30 {
		t.Errorf("KubeadmControlPlane rollout.before.certificatesExpiryDays %d, want 30", got)
	}

	o = validOptions()
	o.Class, o.CertificatesExpiryDays = "edge", 45
	if err := o.Complete([]string{"store"}); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(o.variables, func(v clusterv1.ClusterVariable) bool { return v.Name == "certificatesExpiryDays" }); i < 0 ||
		string(o.variables[i].Value.Raw) != "45" {
		t.Errorf("with --class: variables %+v, want certificatesExpiryDays 45", o.variables)
	}

	o = validOptions()
	o.ControlPlane, o.CertificatesExpiryDays = "machines", 60
	for _, obj := range objects(t, o) {
		if em, ok := obj.(*infrav1.EdgeMachine); ok && em.Spec.CertificatesRenewBeforeDays != 60 {
			t.Errorf("EdgeMachine %s renews %d days before expiry, want 60", em.Name, em.Spec.CertificatesRenewBeforeDays)
		}
	}
	find[*infrav1.EdgeMachine](t, objects(t, o))

	for _, tc := range []struct {
		days          int32
		controlPlane  string
		controlPlanes int32
		want          string
	}{
		{3, "kubeadm", 1, "want 7 or more"},
		{3, "machines", 1, "want 7 or more"},
		{30, "machines", 3, "would all restart at once"},
	} {
		o := validOptions()
		o.CertificatesExpiryDays, o.ControlPlane, o.ControlPlaneMachines = tc.days, tc.controlPlane, tc.controlPlanes
		if err := o.Complete([]string{"store"}); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d days, control plane %s: want an error saying %q, got %v", tc.days, tc.controlPlane, tc.want, err)
		}
	}
}
