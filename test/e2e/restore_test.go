package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// backedUp are the kinds a backup of the hub holds, as Velero backs up a
// namespace: fleet's and Cluster API's objects and every Secret (the hub
// CA, enrollment tokens, bootstrap data, the clusters' CAs and kubeconfigs).
var backedUp = []schema.GroupVersionKind{
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "ConfigMap"},
	clusterv1.GroupVersion.WithKind("Cluster"),
	clusterv1.GroupVersion.WithKind("MachineDeployment"),
	clusterv1.GroupVersion.WithKind("MachineSet"),
	clusterv1.GroupVersion.WithKind("Machine"),
	clusterv1.GroupVersion.WithKind("MachineHealthCheck"),
	{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfig"},
	{Group: "bootstrap.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmConfigTemplate"},
	{Group: "controlplane.cluster.x-k8s.io", Version: "v1beta2", Kind: "KubeadmControlPlane"},
	infrav1.GroupVersion.WithKind("EdgeCluster"),
	infrav1.GroupVersion.WithKind("EdgeMachineTemplate"),
	infrav1.GroupVersion.WithKind("EdgeMachine"),
	infrav1.GroupVersion.WithKind("EdgeHost"),
}

// backup is a namespace's objects as YAML documents, one per object.
type backup []string

// takeBackup writes every backed-up object of ns as YAML, as `velero
// backup create --include-namespaces ns` stores them (status included; the
// restore decides what to keep). The files go to a directory for the log.
func takeBackup(t *testing.T, ns string) backup {
	t.Helper()
	dir := t.TempDir()
	var out backup
	for _, gvk := range backedUp {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		must(t, hub.Client.List(context.Background(), list, client.InNamespace(ns)))
		for _, o := range list.Items {
			b, err := yaml.Marshal(o.Object)
			must(t, err)
			out = append(out, string(b))
			must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d-%s-%s.yaml", len(out), strings.ToLower(gvk.Kind), o.GetName())), b, 0o600))
		}
	}
	t.Logf("backup of %s: %d objects in %s", ns, len(out), dir)
	return out
}

// loseHub plays the loss of the hub's data: every backed-up object of ns
// goes, as if etcd were lost, with no controller acting on the deletions
// (Cluster API's reconcilers run in this process for the whole suite, so
// the Cluster is paused first and finalizers are dropped; fleet's hub is
// stopped). The workload cluster and the agents live on.
func loseHub(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	pauseCluster(t, ns, true)
	for i := len(backedUp) - 1; i >= 0; i-- {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(backedUp[i].GroupVersion().WithKind(backedUp[i].Kind + "List"))
		must(t, hub.Client.List(ctx, list, client.InNamespace(ns)))
		for j := range list.Items {
			o := &list.Items[j]
			if o.GetKind() == "Cluster" {
				continue // last: it is what keeps Cluster API from acting
			}
			forget(t, o)
		}
	}
	cluster := &unstructured.Unstructured{}
	cluster.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("Cluster"))
	must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
	forget(t, cluster)
	eventually(t, "the hub's objects gone", func() error {
		for _, gvk := range backedUp {
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
			if err := hub.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
				return err
			}
			if len(list.Items) > 0 {
				return fmt.Errorf("%d %s left", len(list.Items), gvk.Kind)
			}
		}
		return nil
	})
}

// forget deletes o without letting a finalizer run.
func forget(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	if len(o.GetFinalizers()) > 0 {
		p := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		if err := hub.Client.Patch(ctx, o, p); client.IgnoreNotFound(err) != nil {
			t.Fatalf("dropping the finalizers of %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	if err := hub.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
		t.Fatalf("deleting %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// restore re-creates the objects of b whose kind keep accepts, as Velero
// restores them: metadata reset (uid, resourceVersion, generation,
// creationTimestamp, managedFields go; labels, annotations, finalizers and
// ownerReferences stay, the latter with their stale uids, which Cluster
// API's controllers re-point by name), status dropped. The Cluster comes
// back paused, as clusterctl move and Cluster API's backup guidance have it,
// so no controller acts on a half-restored set; unpause it after.
func restore(t *testing.T, b backup, keep func(kind string) bool) {
	t.Helper()
	for _, doc := range b {
		o := &unstructured.Unstructured{}
		must(t, yaml.Unmarshal([]byte(doc), &o.Object))
		if !keep(o.GetKind()) {
			continue
		}
		for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
			"deletionGracePeriodSeconds", "selfLink", "generateName", "managedFields"} {
			unstructured.RemoveNestedField(o.Object, "metadata", f)
		}
		delete(o.Object, "status")
		if o.GetKind() == "Cluster" {
			must(t, unstructured.SetNestedField(o.Object, true, "spec", "paused"))
		}
		if err := hub.Client.Create(context.Background(), o); err != nil {
			t.Fatalf("restoring %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func pauseCluster(t *testing.T, ns string, paused bool) {
	t.Helper()
	cluster := &clusterv1.Cluster{}
	must(t, hub.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: clusterName}, cluster))
	p := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"paused":%v}}`, paused)))
	must(t, hub.Client.Patch(context.Background(), cluster, p))
}

func all(string) bool { return true }

// hostClaims maps each EdgeHost's name to the EdgeMachine that holds it
// ("" for none).
func hostClaims(ctx context.Context, ns string) (map[string]string, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := hub.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, h := range hosts.Items {
		out[h.Name] = ""
		if h.Spec.ClaimRef != nil {
			out[h.Name] = h.Spec.ClaimRef.Name
		}
	}
	return out, nil
}

// sameFleet checks that the hosts are those of want, every one connected,
// the claimed ones Provisioned.
func sameFleet(ctx context.Context, ns string, want map[string]string) error {
	got, err := hostClaims(ctx, ns)
	if err != nil {
		return err
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("hosts and claims %v, want %v", got, want)
	}
	hosts := &infrav1.EdgeHostList{}
	if err := hub.Client.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, h := range hosts.Items {
		c := conditions.Get(&h, infrav1.AgentConnectedCondition)
		wantPhase := infrav1.HostAvailable
		if want[h.Name] != "" {
			wantPhase = infrav1.HostProvisioned
		}
		if c == nil || c.Status != "True" || h.Status.Phase != wantPhase {
			return fmt.Errorf("host %s: phase %s (want %s), connected %v", h.Name, h.Status.Phase, wantPhase, c)
		}
	}
	return nil
}

// untouched checks that no agent enrolled again or reset its host since
// the log offsets in since, and that every host that ran a Machine still
// has its bootstrap's sentinel.
func untouched(t *testing.T, agents []*agentProc, since map[string]int, claims map[string]string) {
	t.Helper()
	for _, a := range agents {
		log := a.log.String()[since[a.name]:]
		for _, bad := range []string{`"msg":"Resetting host"`, `"msg":"Enrolled"`, `"msg":"Hub revoked this host's identity"`, `"msg":"Provisioning"`} {
			if strings.Contains(log, bad) {
				t.Errorf("agent %s logged %q after the hub's loss:\n%s", a.name, bad, tail(log, 3000))
			}
		}
		_, err := os.Stat(filepath.Join(a.root, "run/cluster-api/bootstrap-success.complete"))
		if claims[a.name] != "" && err != nil {
			t.Errorf("host %s lost its bootstrap sentinel: %v", a.name, err)
		}
	}
}

// logOffsets is where each agent's log stands now.
func logOffsets(agents []*agentProc) map[string]int {
	out := map[string]int{}
	for _, a := range agents {
		out[a.name] = len(a.log.String())
	}
	return out
}

// A hub restored from a backup keeps its fleet: every agent comes back as
// the same host under its re-created EdgeHost (new uid, no status), with
// no enrollment and no reset, and every Machine is Running with its nodeRef
// again. A restore without the EdgeHosts resets nothing either: each agent
// keeps its identity and node and waits, and each EdgeMachine names the
// host it cannot find; once the EdgeHosts are restored too, all is back.
// An EdgeHost restored twice (under two names) holding one running
// machine's claim is refused with DuplicateClaim, and nothing is reset.
func TestRestoreFromBackup(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c := hub.Client
	addr := freeAddr(t)
	gw, stopHub := startFleetHub(t, ns, addr)
	hubURL := "https://" + gw.Addr()
	agentBin, simBin := buildBinaries(t)
	_, wkc := createCluster(t, ns)
	cpToken, wToken := roleTokens(t, ns)
	pin := gw.CA().Pin()
	agents := []*agentProc{
		startAgent(t, "rs-cp-0", agentBin, simBin, hubURL, pin, cpToken, wkc),
		startAgent(t, "rs-w-0", agentBin, simBin, hubURL, pin, wToken, wkc),
		startAgent(t, "rs-w-1", agentBin, simBin, hubURL, pin, wToken, wkc),
		startAgent(t, "rs-spare", agentBin, simBin, hubURL, pin, wToken, wkc),
	}
	eventually(t, "4 hosts Available", func() error { return testenv.HostsAvailable(ctx, c, ns, 4) })
	createCPMachine(t, c, ns, "cp-0", nil)
	eventually(t, "the control plane Running", func() error { return testenv.MachinesRunning(ctx, c, ns, 1) })
	createWorkerMachine(t, c, ns, "worker-a", nil)
	createWorkerMachine(t, c, ns, "worker-b", nil)
	eventually(t, "3 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, c, ns, 3) })
	claims, err := hostClaims(ctx, ns)
	must(t, err)
	t.Logf("hosts and their claims: %v", claims)
	for _, a := range agents {
		// What untouched looks for is what the agents log.
		if !strings.Contains(a.log.String(), `"msg":"Enrolled"`) {
			t.Fatalf("agent %s never logged its enrollment as untouched expects:\n%s", a.name, tail(a.log.String(), 2000))
		}
	}
	b := takeBackup(t, ns)

	// The hub is lost and restored in full.
	since := logOffsets(agents)
	stopHub()
	loseHub(t, ns)
	restore(t, b, all)
	_, stopHub = startFleetHub(t, ns, addr)
	pauseCluster(t, ns, false)
	eventually(t, "the same hosts back, connected, claimed as before", func() error { return sameFleet(ctx, ns, claims) })
	eventually(t, "3 Machines Running with nodeRef after the restore", func() error { return testenv.MachinesRunning(ctx, c, ns, 3) })
	untouched(t, agents, since, claims)

	restoreWithoutHosts(t, agents, ns, b, claims, stopHub, addr)
	duplicatedHost(t, agents, ns, claims)
}

// restoreWithoutHosts loses the hub again and restores everything but the
// EdgeHosts, then the EdgeHosts.
func restoreWithoutHosts(t *testing.T, agents []*agentProc, ns string, b backup, claims map[string]string, stopHub func(), addr string) {
	t.Helper()
	ctx := context.Background()
	since := logOffsets(agents)
	stopHub()
	loseHub(t, ns)
	restore(t, b, func(kind string) bool { return kind != "EdgeHost" })
	startFleetHub(t, ns, addr)
	pauseCluster(t, ns, false)
	eventually(t, "every EdgeMachine names the host it cannot find", func() error {
		ems := &infrav1.EdgeMachineList{}
		if err := hub.Client.List(ctx, ems, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(ems.Items) != 3 {
			return fmt.Errorf("%d EdgeMachines", len(ems.Items))
		}
		for _, em := range ems.Items {
			cond := conditions.Get(&em, infrav1.HostClaimedCondition)
			if cond == nil || cond.Reason != infrav1.HostNotFoundReason || !strings.Contains(cond.Message, strings.TrimPrefix(em.Spec.ProviderID, "edge://"+ns+"/")) {
				return fmt.Errorf("EdgeMachine %s: HostClaimed %+v", em.Name, cond)
			}
		}
		return nil
	})
	eventually(t, "every agent told the hub has no EdgeHost for it", func() error {
		for _, a := range agents {
			if !strings.Contains(a.log.String()[since[a.name]:], "the hub has no EdgeHost for this host") {
				return fmt.Errorf("agent %s not told yet", a.name)
			}
		}
		return nil
	})
	hosts := &infrav1.EdgeHostList{}
	must(t, hub.Client.List(ctx, hosts, client.InNamespace(ns)))
	if len(hosts.Items) != 0 {
		t.Errorf("EdgeHosts appeared without a restore (agents enrolled again?): %v", len(hosts.Items))
	}
	untouched(t, agents, since, claims)

	restore(t, b, func(kind string) bool { return kind == "EdgeHost" })
	eventually(t, "the same hosts back once restored", func() error { return sameFleet(ctx, ns, claims) })
	eventually(t, "3 Machines Running with nodeRef", func() error { return testenv.MachinesRunning(ctx, hub.Client, ns, 3) })
	untouched(t, agents, since, claims)
}

// duplicatedHost restores one claimed EdgeHost a second time under another
// name: the machine refuses the duplicate, nothing is reset, and deleting
// the copy ends it.
func duplicatedHost(t *testing.T, agents []*agentProc, ns string, claims map[string]string) {
	t.Helper()
	ctx := context.Background()
	since := logOffsets(agents)
	name := ""
	for host, machine := range claims {
		if machine != "" && host != "rs-cp-0" {
			name = host
		}
	}
	orig := &infrav1.EdgeHost{}
	must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, orig))
	machine := orig.Spec.ClaimRef.Name
	copyName := name + "-copy"
	dup := &infrav1.EdgeHost{}
	dup.Namespace, dup.Name = ns, copyName
	dup.Labels, dup.Annotations, dup.Spec = orig.Labels, orig.Annotations, orig.Spec
	must(t, hub.Client.Create(ctx, dup))
	eventually(t, "the duplicate claim refused", func() error {
		em := &infrav1.EdgeMachine{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, em); err != nil {
			return err
		}
		cond := conditions.Get(em, infrav1.HostClaimedCondition)
		if cond == nil || cond.Reason != infrav1.DuplicateClaimReason || !strings.Contains(cond.Message, copyName) {
			return fmt.Errorf("HostClaimed %+v", cond)
		}
		return nil
	})
	for _, n := range []string{name, copyName} {
		h := &infrav1.EdgeHost{}
		must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: n}, h))
		if h.Spec.ClaimRef == nil || h.Spec.ClaimRef.Name != machine {
			t.Errorf("EdgeHost %s lost the claim of %s: %+v", n, machine, h.Spec.ClaimRef)
		}
	}
	// The operator deletes the copy.
	copyObj := &unstructured.Unstructured{}
	copyObj.SetGroupVersionKind(infrav1.GroupVersion.WithKind("EdgeHost"))
	must(t, hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: copyName}, copyObj))
	must(t, hub.Client.Delete(ctx, copyObj))
	// As docs/OPERATING.md says, and nothing more: it goes by itself.
	eventually(t, "the copy gone", func() error {
		err := hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: copyName}, copyObj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return errors.New("still there")
	})
	eventually(t, "the machine holds its one host again", func() error {
		em := &infrav1.EdgeMachine{}
		if err := hub.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: machine}, em); err != nil {
			return err
		}
		if !conditions.IsTrue(em, infrav1.HostClaimedCondition) {
			return fmt.Errorf("HostClaimed %+v", conditions.Get(em, infrav1.HostClaimedCondition))
		}
		return sameFleet(ctx, ns, claims)
	})
	untouched(t, agents, since, claims)
}
