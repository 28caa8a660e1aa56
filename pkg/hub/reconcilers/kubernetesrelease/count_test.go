package kubernetesrelease

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// A release whose artifact no agent could take (here an OCI reference with
// an upper-case repository, which the CRD's pattern lets through) is
// ordered to no host, and its status says why.
func TestCountRefusesAnArtifactAgentsCannotTake(t *testing.T) {
	rel := &infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 2},
		Spec: infrav1.EdgeKubernetesReleaseSpec{Version: "v1.36.3", Artifacts: []infrav1.KubernetesArtifact{
			{Arch: "amd64", URL: "oci://ghcr.io/MyOrg/kubernetes:v1.36.3", SHA256: strings.Repeat("a", 64)}}}}
	host := infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns"}, Status: infrav1.EdgeHostStatus{Facts: infrav1.HostFacts{Arch: "amd64"}}}
	count(rel, []infrav1.EdgeHost{host})
	c := meta.FindStatusCondition(rel.Status.Conditions, StagedCondition)
	if c == nil || c.Reason != InvalidArtifactReason || !strings.Contains(c.Message, `artifact amd64: v1.36.3: "oci://ghcr.io/MyOrg/kubernetes:v1.36.3": "MyOrg/kubernetes" is not a repository name`) {
		t.Errorf("condition %+v", c)
	}
	if rel.Status.Hosts != 0 {
		t.Errorf("hosts %d, want none counted", rel.Status.Hosts)
	}
}
