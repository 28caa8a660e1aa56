package hostupgrade

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func TestCheck(t *testing.T) {
	host := func(running string, staged ...string) *infrav1.EdgeHost {
		return &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h"},
			Status: infrav1.EdgeHostStatus{KubernetesVersion: running, Facts: infrav1.HostFacts{KubernetesVersions: staged}}}
	}
	for _, tc := range []struct {
		host *infrav1.EdgeHost
		to   string
		want string
	}{
		{host("v1.35.4", "v1.36.3"), "v1.36.3", ""},
		{host("v1.35.4", "v1.35.9"), "v1.35.9", ""},
		{host("v1.36.3"), "v1.36.3", ""},
		{host(""), "v1.36.3", "the agent of EdgeHost h reports no Kubernetes version"},
		{host("v1.35.4", "v1.37.0"), "v1.37.0", "EdgeHost h runs v1.35.4: v1.37.0 skips a minor version"},
		{host("v1.35.4", "v2.0.0"), "v2.0.0", "skips a minor version"},
		{host("v1.35.4", "v1.34.0"), "v1.34.0", "v1.34.0 would be a downgrade"},
		{host("v1.35.4", "v1.36.2"), "v1.36.3", "EdgeHost h cannot get v1.36.3: stage it under /opt/fleet/kubernetes/v1.36.3 on the host (staged: v1.36.2)"},
		{host("v1.35.4"), "1.36.3", `version "1.36.3": want vMAJOR.MINOR.PATCH`},
	} {
		err := Check(tc.host, tc.to)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s (staged %v) to %s: %v, want %q", tc.host.Status.KubernetesVersion, tc.host.Status.Facts.KubernetesVersions, tc.to, err, tc.want)
		}
	}
}
