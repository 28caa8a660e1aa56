package staging_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/staging"
)

func rel(name, version string, arches ...string) infrav1.EdgeKubernetesRelease {
	r := infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec: infrav1.EdgeKubernetesReleaseSpec{Version: version}}
	for _, a := range arches {
		r.Spec.Artifacts = append(r.Spec.Artifacts, infrav1.KubernetesArtifact{Arch: a, URL: "https://m/" + name + "-" + a, SHA256: strings.Repeat("a", 64)})
	}
	return r
}

// agentWith is an agent that has the capabilities.
func agentWith(capabilities ...string) func(string) bool {
	return func(c string) bool { return slices.Contains(capabilities, c) }
}

func versions(orders []wire.StageOrder) string {
	var out []string
	for _, o := range orders {
		if o.Hub {
			out = append(out, o.Version+"@hub")
			continue
		}
		_, where, _ := strings.Cut(o.URL, "://m/")
		out = append(out, o.Version+"@"+where)
	}
	return strings.Join(out, " ")
}

// A host is told to fetch the releases of its namespace that select it, of
// its architecture and newer than what it runs, oldest first, at most
// wire.MaxStageOrders of the newest.
func TestOrders(t *testing.T) {
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns", Labels: map[string]string{"site": "a"}},
		Status: infrav1.EdgeHostStatus{KubernetesVersion: "v1.35.4", Facts: infrav1.HostFacts{Arch: "arm64"}}}
	otherNS := rel("elsewhere", "v1.36.0", "arm64")
	otherNS.Namespace = "other"
	notSelected := rel("not-selected", "v1.36.1", "arm64")
	notSelected.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"site": "b"}}
	selected := rel("selected", "v1.36.2", "arm64")
	selected.Spec.HostSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"site": "a"}}
	releases := []infrav1.EdgeKubernetesRelease{
		rel("a-dup", "v1.36.3", "arm64"), rel("amd-only", "v1.36.4", "amd64"), rel("b-dup", "v1.36.3", "arm64"),
		rel("older", "v1.35.0", "arm64"), rel("running", "v1.35.4", "arm64"), rel("patch", "v1.35.10", "amd64", "arm64"),
		otherNS, notSelected, selected,
	}
	if got, want := versions(staging.Orders(host, releases, agentWith())), "v1.35.10@patch-arm64 v1.36.2@selected-arm64 v1.36.3@a-dup-arm64"; got != want {
		t.Errorf("orders %q, want %q", got, want)
	}

	// A host not provisioned yet takes every version (it may be claimed
	// by a Machine of any of them).
	host.Status.KubernetesVersion = ""
	if got := staging.Orders(host, releases, agentWith()); len(got) != 5 {
		t.Errorf("a clean host gets %q", versions(got))
	}

	var many []infrav1.EdgeKubernetesRelease
	for i := range 12 {
		many = append(many, rel(fmt.Sprintf("r%02d", i), fmt.Sprintf("v1.36.%d", i), "arm64"))
	}
	got := staging.Orders(host, many, agentWith())
	if len(got) != wire.MaxStageOrders || got[0].Version != "v1.36.4" || got[len(got)-1].Version != "v1.36.11" {
		t.Errorf("12 releases give %q", versions(got))
	}
}

// A release the hub carries is ordered with no url, and only to hosts
// whose agent takes archives through its session; the others are not
// ordered it (they could not fetch it), and an older direct release of
// another version still is.
func TestOrdersThroughTheHub(t *testing.T) {
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns"},
		Status: infrav1.EdgeHostStatus{KubernetesVersion: "v1.35.4", Facts: infrav1.HostFacts{Arch: "amd64"}}}
	viaHub := rel("via-hub", "v1.36.3", "amd64")
	viaHub.Spec.Delivery = infrav1.KubernetesDeliveryHub
	releases := []infrav1.EdgeKubernetesRelease{rel("direct", "v1.35.10", "amd64"), viaHub}
	if got, want := versions(staging.Orders(host, releases, agentWith(wire.CapabilityStageFromHub))), "v1.35.10@direct-amd64 v1.36.3@hub"; got != want {
		t.Errorf("an agent that takes archives from the hub: orders %q, want %q", got, want)
	}
	if got := staging.Orders(host, releases, agentWith(wire.CapabilityStageFromHub)); got[1].URL != "" || got[1].SHA256 != viaHub.Spec.Artifacts[0].SHA256 {
		t.Errorf("the hub's order %+v tells where the hub fetches from, or lacks the sha256", got[1])
	}
	if got, want := versions(staging.Orders(host, releases, agentWith())), "v1.35.10@direct-amd64"; got != want {
		t.Errorf("an older agent: orders %q, want %q", got, want)
	}
}

// A release fetched from an OCI registry is ordered, with its oci://
// reference, only to hosts whose agent fetches from registries; an older
// agent would refuse the whole desired state it came in.
func TestOrdersFromARegistry(t *testing.T) {
	host := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns"},
		Status: infrav1.EdgeHostStatus{KubernetesVersion: "v1.35.4", Facts: infrav1.HostFacts{Arch: "amd64"}}}
	oci := rel("oci", "v1.36.3", "amd64")
	oci.Spec.Artifacts[0].URL = "oci://m/edge/kubernetes:v1.36.3"
	releases := []infrav1.EdgeKubernetesRelease{rel("direct", "v1.35.10", "amd64"), oci}
	if got, want := versions(staging.Orders(host, releases, agentWith(wire.CapabilityStageFromOCI))), "v1.35.10@direct-amd64 v1.36.3@edge/kubernetes:v1.36.3"; got != want {
		t.Errorf("an agent that fetches from registries: orders %q, want %q", got, want)
	}
	if got, want := versions(staging.Orders(host, releases, agentWith(wire.CapabilityStageFromHub))), "v1.35.10@direct-amd64"; got != want {
		t.Errorf("an older agent: orders %q, want %q", got, want)
	}
	// A reference the agent's codec would refuse is not sent: the agent
	// would drop the whole desired state, again on every session.
	bad := rel("bad", "v1.36.4", "amd64")
	bad.Spec.Artifacts[0].URL = "oci://m/Edge/kubernetes"
	if got, want := versions(staging.Orders(host, append(releases, bad), agentWith(wire.CapabilityStageFromOCI))), "v1.35.10@direct-amd64 v1.36.3@edge/kubernetes:v1.36.3"; got != want {
		t.Errorf("a malformed reference: orders %q, want %q", got, want)
	}
	// Carried by the hub, the registry is the hub's to reach.
	oci.Spec.Delivery = infrav1.KubernetesDeliveryHub
	releases[1] = oci
	if got, want := versions(staging.Orders(host, releases, agentWith(wire.CapabilityStageFromHub))), "v1.35.10@direct-amd64 v1.36.3@hub"; got != want {
		t.Errorf("a registry's archive carried by the hub: orders %q, want %q", got, want)
	}
}
