package reconcilers_test

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Every fleet CRD carries the contract label Cluster API looks for, under
// the exact name Cluster API computes for the kind.
func TestCRDsCarryContractLabel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, plural := range []string{"edgeclusters", "edgeclustertemplates", "edgemachines", "edgemachinetemplates", "edgehosts"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		name := plural + "." + infrav1.GroupVersion.Group
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		if got := crd.Labels["cluster.x-k8s.io/v1beta2"]; got != "v1alpha1" {
			t.Errorf("CRD %s label cluster.x-k8s.io/v1beta2 = %q, want v1alpha1", name, got)
		}
	}
}

// `kubectl get` shows the columns operators need, read from the server's
// Table output exactly as kubectl receives it.
func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.host("table-host", nil)
	for plural, want := range map[string][]string{
		"edgemachines": {"Name", "Cluster", "Phase", "Host", "ProviderID", "Node", "Age"},
		"edgehosts":    {"Name", "Phase", "Claimed-By", "Connected", "Last-Seen", "Agent", "Age"},
	} {
		got, err := tableColumns(w.ctx, w.ns, plural)
		if err != nil {
			t.Fatalf("%s: %v", plural, err)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("kubectl get %s columns %v, want %v", plural, got, want)
		}
	}
}

func tableColumns(ctx context.Context, ns, plural string) ([]string, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.GroupVersion = &infrav1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientNegotiator()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	table := &metav1.Table{}
	if err := rc.Get().Namespace(ns).Resource(plural).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
		Do(ctx).Into(table); err != nil {
		return nil, err
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	return cols, nil
}

// EdgeMachineTemplate.spec.template is immutable, with a message that says
// what to do instead.
func TestTemplateIsImmutable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tmpl := &infrav1.EdgeMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "immutable", Namespace: w.ns},
		Spec: infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: infrav1.EdgeMachineSpec{
			HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
		}}},
	}
	w.must(env.Client.Create(w.ctx, tmpl))
	tmpl.Spec.Template.Spec.HostSelector.MatchLabels["pool"] = "b"
	err := env.Client.Update(w.ctx, tmpl)
	if err == nil || !strings.Contains(err.Error(), "spec.template is immutable") {
		t.Fatalf("update of spec.template: err %v, want immutable refusal", err)
	}
	// Metadata stays editable.
	w.must(w.get("immutable", tmpl))
	tmpl.Labels = map[string]string{"owner": "team-a"}
	if err := env.Client.Update(w.ctx, tmpl); err != nil {
		t.Fatalf("label update refused: %v", err)
	}
}

// EdgeClusterTemplate.spec.template is immutable too: a ClusterClass rolls
// a change out by pointing at a new template.
func TestClusterTemplateIsImmutable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	tmpl := &infrav1.EdgeClusterTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "immutable", Namespace: w.ns},
		Spec: infrav1.EdgeClusterTemplateSpec{Template: infrav1.EdgeClusterTemplateResource{Spec: infrav1.EdgeClusterSpec{
			HostSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "a"}},
		}}},
	}
	w.must(env.Client.Create(w.ctx, tmpl))
	tmpl.Spec.Template.Spec.HostSelector.MatchLabels["site"] = "b"
	err := env.Client.Update(w.ctx, tmpl)
	if err == nil || !strings.Contains(err.Error(), "create a new EdgeClusterTemplate and point the ClusterClass at it") {
		t.Fatalf("update of spec.template: err %v, want immutable refusal", err)
	}
}

// An aborted roll-out stays aborted and a roll-out's version never
// changes; a version an agent would refuse is refused here first.
func TestAgentRolloutSpecRules(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "rules", Namespace: w.ns},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.2"}}
	w.must(env.Client.Create(w.ctx, ro))
	// Merge patches: the roll-out controller writes the status meanwhile.
	change := func(edit func(*infrav1.EdgeAgentRollout)) error {
		orig := ro.DeepCopy()
		edit(ro)
		return env.Client.Patch(w.ctx, ro, client.MergeFrom(orig))
	}
	if err := change(func(r *infrav1.EdgeAgentRollout) { r.Spec.Version = "v0.9.3" }); err == nil || !strings.Contains(err.Error(), "version cannot change") {
		t.Fatalf("changing the version: %v", err)
	}
	w.must(env.Client.Get(w.ctx, client.ObjectKeyFromObject(ro), ro))
	w.must(change(func(r *infrav1.EdgeAgentRollout) { r.Spec.Abort = true }))
	if err := change(func(r *infrav1.EdgeAgentRollout) { r.Spec.Abort = false }); err == nil || !strings.Contains(err.Error(), "an aborted roll-out stays aborted") {
		t.Fatalf("unsetting abort: %v", err)
	}
	bad := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "bad-version", Namespace: w.ns},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: "v1.0.0-rc_1"}}
	if err := env.Client.Create(w.ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.version") {
		t.Fatalf("a version agents refuse: %v", err)
	}
}
