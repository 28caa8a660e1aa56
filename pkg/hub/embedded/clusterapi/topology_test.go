package clusterapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func createYAML(t *testing.T, ns, docs string) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(docs), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding the test's YAML: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(ns)
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// installClass creates the ClusterClass fleet ships, as clusterctl or
// `kubectl fleet create cluster --class edge` installs it.
func installClass(t *testing.T, ns string) {
	t.Helper()
	objs, err := clustertemplate.ClassObjects(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if err := env.Client.Create(context.Background(), u); err != nil {
			t.Fatalf("creating %s %s of the shipped class: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// topologyObjects waits for the topology controller to make the Cluster's
// objects and returns its EdgeCluster, KubeadmControlPlane and the
// control plane's EdgeMachineTemplate.
func topologyObjects(t *testing.T, ns, name string) (*infrav1.EdgeCluster, *controlplanev1.KubeadmControlPlane, *infrav1.EdgeMachineTemplate) {
	t.Helper()
	ctx := context.Background()
	cluster := &clusterv1.Cluster{}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the topology controller fills the Cluster's references", func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cluster); err != nil {
			return err
		}
		if cluster.Spec.InfrastructureRef.Kind != "EdgeCluster" || cluster.Spec.ControlPlaneRef.Kind != "KubeadmControlPlane" {
			return fmt.Errorf("infrastructureRef %+v, controlPlaneRef %+v", cluster.Spec.InfrastructureRef, cluster.Spec.ControlPlaneRef)
		}
		return nil
	})
	ec := &infrav1.EdgeCluster{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Spec.InfrastructureRef.Name}, ec); err != nil {
		t.Fatalf("the EdgeCluster the topology names: %v", err)
	}
	kcp := &controlplanev1.KubeadmControlPlane{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Spec.ControlPlaneRef.Name}, kcp); err != nil {
		t.Fatalf("the KubeadmControlPlane the topology names: %v", err)
	}
	emt := &infrav1.EdgeMachineTemplate{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Name}, emt); err != nil {
		t.Fatalf("the control plane's EdgeMachineTemplate: %v", err)
	}
	return ec, kcp, emt
}

// Cluster API's real topology reconcilers turn the ClusterClass fleet
// ships and a Cluster's topology into the objects of a cluster: an
// EdgeCluster with the endpoint its agents resolve, a KubeadmControlPlane
// with fleet's node wiring and machines cloned from the EdgeMachineTemplate,
// and a MachineDeployment of workers that needs no spare host.
func TestShippedClassWithoutVariables(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "topology")
	installClass(t, ns)
	createYAML(t, ns, `
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: store-1}
spec:
  topology:
    classRef: {name: edge}
    version: v1.36.3
    controlPlane: {replicas: 1}
    workers:
      machineDeployments:
      - {class: worker, name: md-0, replicas: 1}
`)
	ec, kcp, emt := topologyObjects(t, ns, "store-1")
	if want := "store-1." + ns + "." + infrav1.EndpointDomain; ec.Spec.ControlPlaneEndpoint.Host != want || ec.Spec.ControlPlaneEndpoint.Port != 6443 {
		t.Errorf("EdgeCluster endpoint %+v, want %s:6443", ec.Spec.ControlPlaneEndpoint, want)
	}
	if kcp.Spec.Version != "v1.36.3" || kcp.Spec.Replicas == nil || *kcp.Spec.Replicas != 1 ||
		kcp.Spec.MachineTemplate.Spec.InfrastructureRef.Kind != "EdgeMachineTemplate" {
		t.Errorf("KubeadmControlPlane version %s, replicas %v, machine template %+v", kcp.Spec.Version, kcp.Spec.Replicas,
			kcp.Spec.MachineTemplate.Spec.InfrastructureRef)
	}
	// The class's node wiring is what create writes.
	for _, nr := range []bootstrapv1.NodeRegistrationOptions{kcp.Spec.KubeadmConfigSpec.InitConfiguration.NodeRegistration,
		kcp.Spec.KubeadmConfigSpec.JoinConfiguration.NodeRegistration} {
		if nr.Name != clustertemplate.NodeNameTemplate || len(nr.KubeletExtraArgs) != 1 ||
			nr.KubeletExtraArgs[0].Name != clustertemplate.ProviderIDArg || *nr.KubeletExtraArgs[0].Value != clustertemplate.ProviderIDTemplate {
			t.Errorf("control-plane nodeRegistration %+v: want the node name and provider-id create writes", nr)
		}
		if nr.Taints != nil {
			t.Errorf("taints %v without controlPlaneSchedulable: want kubeadm's default", *nr.Taints)
		}
	}
	if sel := emt.Spec.Template.Spec.HostSelector; sel == nil || len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 0 {
		t.Errorf("the control plane's EdgeMachineTemplate selects %v, want every host", sel)
	}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the topology's MachineDeployment and its health check", func() error {
		mds := &clusterv1.MachineDeploymentList{}
		if err := env.Client.List(ctx, mds, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterTopologyMachineDeploymentNameLabel: "md-0"}); err != nil {
			return err
		}
		if len(mds.Items) != 1 || mds.Items[0].Spec.Template.Spec.InfrastructureRef.Kind != "EdgeMachineTemplate" {
			return fmt.Errorf("%d MachineDeployments for md-0", len(mds.Items))
		}
		ru := mds.Items[0].Spec.Rollout.Strategy.RollingUpdate
		if ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
			return fmt.Errorf("the workers roll out with maxSurge %v, maxUnavailable %v; want 0 and 1", ru.MaxSurge, ru.MaxUnavailable)
		}
		mhcs := &clusterv1.MachineHealthCheckList{}
		if err := env.Client.List(ctx, mhcs, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(mhcs.Items) != 2 {
			return fmt.Errorf("%d MachineHealthChecks, want the control plane's and the workers'", len(mhcs.Items))
		}
		return nil
	})
}

// Every variable of the shipped class reaches the objects it is for.
func TestShippedClassVariables(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "variables")
	installClass(t, ns)
	createYAML(t, ns, `
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: store-2}
spec:
  topology:
    classRef: {name: edge}
    version: v1.36.3
    controlPlane: {replicas: 1}
    workers:
      machineDeployments:
      - class: worker
        name: md-0
        replicas: 1
        variables:
          overrides:
          - {name: zone, value: back-room}
    variables:
    - {name: site, value: store-2}
    - {name: zone, value: front}
    - name: controlPlaneHostSelector
      value:
        matchLabels: {role: control-plane}
        matchExpressions: [{key: gpu, operator: DoesNotExist}]
    - {name: workerHostSelector, value: {matchLabels: {role: worker}}}
    - {name: controlPlaneSchedulable, value: true}
    - {name: certificatesExpiryDays, value: 30}
    - {name: apiServerExtraArgs, value: [{name: audit-log-maxage, value: "7"}]}
    - {name: kubeletExtraArgs, value: [{name: max-pods, value: "50"}]}
    - {name: files, value: [{path: /etc/site, content: store-2, permissions: "0644"}]}
    - {name: preKubeadmCommands, value: [echo pre]}
    - {name: postKubeadmCommands, value: [echo post]}
    - {name: imagePullPolicy, value: Never}
    - {name: ignorePreflightErrors, value: [SystemVerification]}
    - {name: kubeadmPatchesDirectory, value: /etc/kubernetes/patches}
    - name: etcdExternal
      value:
        endpoints: [https://etcd.store-2:2379]
        caFile: /etc/kubernetes/pki/etcd/ca.crt
        certFile: /etc/kubernetes/pki/apiserver-etcd-client.crt
        keyFile: /etc/kubernetes/pki/apiserver-etcd-client.key
`)
	ec, kcp, emt := topologyObjects(t, ns, "store-2")
	wantCP := map[string]string{"role": "control-plane", "site": "store-2", "topology.kubernetes.io/zone": "front"}
	for what, sel := range map[string]*metav1.LabelSelector{"EdgeCluster": ec.Spec.HostSelector, "control-plane EdgeMachineTemplate": emt.Spec.Template.Spec.HostSelector} {
		if sel == nil || !maps.Equal(sel.MatchLabels, wantCP) || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "gpu" {
			t.Errorf("%s selects %v, want labels %v and gpu DoesNotExist", what, sel, wantCP)
		}
	}
	cfg := kcp.Spec.KubeadmConfigSpec
	for what, nr := range map[string]bootstrapv1.NodeRegistrationOptions{"init": cfg.InitConfiguration.NodeRegistration, "join": cfg.JoinConfiguration.NodeRegistration} {
		checkNodeRegistration(t, "control plane "+what, nr)
		if nr.Taints == nil || len(*nr.Taints) != 0 {
			t.Errorf("control plane %s taints %v with controlPlaneSchedulable: want none", what, nr.Taints)
		}
	}
	if cfg.InitConfiguration.Patches.Directory != "/etc/kubernetes/patches" || cfg.JoinConfiguration.Patches.Directory != "/etc/kubernetes/patches" {
		t.Errorf("kubeadm patches directories %q and %q", cfg.InitConfiguration.Patches.Directory, cfg.JoinConfiguration.Patches.Directory)
	}
	if got := cfg.ClusterConfiguration.APIServer.ExtraArgs; len(got) != 1 || got[0].Name != "audit-log-maxage" || *got[0].Value != "7" {
		t.Errorf("kube-apiserver extra args %+v", got)
	}
	// Both variables reach clusterConfiguration: neither patch replaces the other's part.
	if ext := cfg.ClusterConfiguration.Etcd.External; !slices.Equal(ext.Endpoints, []string{"https://etcd.store-2:2379"}) ||
		ext.CAFile != "/etc/kubernetes/pki/etcd/ca.crt" || ext.CertFile != "/etc/kubernetes/pki/apiserver-etcd-client.crt" ||
		ext.KeyFile != "/etc/kubernetes/pki/apiserver-etcd-client.key" {
		t.Errorf("external etcd %+v", ext)
	}
	if len(cfg.Files) != 1 || cfg.Files[0].Path != "/etc/site" || !slices.Equal(cfg.PreKubeadmCommands, []string{"echo pre"}) ||
		!slices.Equal(cfg.PostKubeadmCommands, []string{"echo post"}) {
		t.Errorf("control plane files %+v, commands %v %v", cfg.Files, cfg.PreKubeadmCommands, cfg.PostKubeadmCommands)
	}
	if kcp.Spec.Rollout.Before.CertificatesExpiryDays != 30 {
		t.Errorf("certificatesExpiryDays %d, want 30", kcp.Spec.Rollout.Before.CertificatesExpiryDays)
	}

	// The workers: their own selector and zone, the same kubeadm settings.
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "the workers' templates", func() error {
		mds := &clusterv1.MachineDeploymentList{}
		if err := env.Client.List(ctx, mds, client.InNamespace(ns)); err != nil || len(mds.Items) != 1 {
			return fmt.Errorf("MachineDeployments: %v (%d)", err, len(mds.Items))
		}
		tpl := mds.Items[0].Spec.Template.Spec
		wemt := &infrav1.EdgeMachineTemplate{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tpl.InfrastructureRef.Name}, wemt); err != nil {
			return err
		}
		want := map[string]string{"role": "worker", "site": "store-2", "topology.kubernetes.io/zone": "back-room"}
		if sel := wemt.Spec.Template.Spec.HostSelector; sel == nil || !maps.Equal(sel.MatchLabels, want) {
			return fmt.Errorf("the workers' EdgeMachineTemplate selects %v, want %v", sel, want)
		}
		kct := &bootstrapv1.KubeadmConfigTemplate{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: tpl.Bootstrap.ConfigRef.Name}, kct); err != nil {
			return err
		}
		w := kct.Spec.Template.Spec
		checkNodeRegistration(t, "worker join", w.JoinConfiguration.NodeRegistration)
		if w.JoinConfiguration.Patches.Directory != "/etc/kubernetes/patches" || len(w.Files) != 1 ||
			!slices.Equal(w.PreKubeadmCommands, []string{"echo pre"}) || !slices.Equal(w.PostKubeadmCommands, []string{"echo post"}) {
			return fmt.Errorf("the workers' KubeadmConfigTemplate %+v", w)
		}
		return nil
	})
}

func checkNodeRegistration(t *testing.T, what string, nr bootstrapv1.NodeRegistrationOptions) {
	t.Helper()
	if nr.Name != clustertemplate.NodeNameTemplate || nr.ImagePullPolicy != "Never" || !slices.Equal(nr.IgnorePreflightErrors, []string{"SystemVerification"}) {
		t.Errorf("%s nodeRegistration name %q, imagePullPolicy %q, ignorePreflightErrors %v", what, nr.Name, nr.ImagePullPolicy, nr.IgnorePreflightErrors)
	}
	var args []string
	for _, a := range nr.KubeletExtraArgs {
		args = append(args, a.Name+"="+*a.Value)
	}
	if want := []string{clustertemplate.ProviderIDArg + "=" + clustertemplate.ProviderIDTemplate, "max-pods=50"}; !slices.Equal(args, want) {
		t.Errorf("%s kubelet extra args %v, want %v", what, args, want)
	}
}

// A variable its schema does not allow is refused when the Cluster is
// written, with Cluster API's message naming it.
func TestShippedClassRefusesABadVariable(t *testing.T) {
	ns := env.NewNamespace(t, "badvar")
	installClass(t, ns)
	for _, tc := range []struct{ variable, want string }{
		{`{name: certificatesExpiryDays, value: 3}`, "should be greater than or equal to 7"},
		{`{name: imagePullPolicy, value: Sometimes}`, "Unsupported value"},
		{`{name: nosuchvariable, value: x}`, "nosuchvariable"},
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(`
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: bad, namespace: `+ns+`}
spec:
  topology:
    classRef: {name: edge}
    version: v1.36.3
    controlPlane: {replicas: 1}
    variables: [`+tc.variable+`]
`), &u.Object); err != nil {
			t.Fatal(err)
		}
		err := env.Client.Create(context.Background(), u)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("variable %s: want Cluster API's refusal saying %q, got %v", tc.variable, tc.want, err)
		}
	}
}

// A Cluster whose class does not exist is not silently taken: Cluster API
// refuses it, or says so in its TopologyReconciled condition.
func TestClusterOfAMissingClass(t *testing.T) {
	ctx := context.Background()
	ns := env.NewNamespace(t, "missing")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(clusterv1.GroupVersion.String())
	u.SetKind("Cluster")
	u.SetName("nowhere")
	u.SetNamespace(ns)
	_ = unstructured.SetNestedMap(u.Object, map[string]any{
		"classRef": map[string]any{"name": "no-such-class"}, "version": "v1.36.3"}, "spec", "topology")
	if err := env.Client.Create(ctx, u); err != nil {
		if !strings.Contains(err.Error(), "no-such-class") {
			t.Fatalf("refused without naming the class: %v", err)
		}
		return
	}
	testkit.Eventually(t, time.Minute, 200*time.Millisecond, "TopologyReconciled False naming the missing class", func() error {
		c := &clusterv1.Cluster{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nowhere"}, c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ClusterTopologyReconciledCondition)
		if cond == nil || cond.Status != "False" || !strings.Contains(cond.Message, "no-such-class") {
			return fmt.Errorf("TopologyReconciled %+v", cond)
		}
		return nil
	})
}
