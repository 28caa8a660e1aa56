package hostphase

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func TestPhase(t *testing.T) {
	claim := &infrav1.HostClaimReference{Name: "m", UID: "u1"}
	prov := func(uid types.UID, s infrav1.ProvisioningState) *infrav1.HostProvisioningStatus {
		return &infrav1.HostProvisioningStatus{ClaimUID: uid, State: s}
	}
	tests := []struct {
		name       string
		generation int64
		observed   int64
		claim      *infrav1.HostClaimReference
		prov       *infrav1.HostProvisioningStatus
		want       infrav1.EdgeHostPhase
	}{
		{"fresh host", 1, 0, nil, nil, infrav1.HostAvailable},
		{"claimed, agent silent", 2, 1, claim, nil, infrav1.HostClaimed},
		{"claimed, report for an older claim", 2, 2, claim, prov("u0", infrav1.ProvisioningSucceeded), infrav1.HostClaimed},
		{"provisioning", 2, 2, claim, prov("u1", infrav1.ProvisioningRunning), infrav1.HostProvisioning},
		{"provisioned", 2, 2, claim, prov("u1", infrav1.ProvisioningSucceeded), infrav1.HostProvisioned},
		{"bootstrap failed", 2, 2, claim, prov("u1", infrav1.ProvisioningFailed), infrav1.HostNeedsAttention},
		{"released, workload still there", 3, 2, nil, prov("u1", infrav1.ProvisioningSucceeded), infrav1.HostDeprovisioning},
		{"released, resetting", 3, 3, nil, prov("u1", infrav1.ProvisioningResetting), infrav1.HostDeprovisioning},
		{"released, reset failed", 3, 3, nil, prov("u1", infrav1.ProvisioningResetFailed), infrav1.HostNeedsAttention},
		{"released, agent has not seen the release", 3, 2, nil, nil, infrav1.HostDeprovisioning},
		{"released and reset", 3, 3, nil, nil, infrav1.HostAvailable},
		{"deleted (generation bumped) but never claimed", 2, 1, nil, nil, infrav1.HostAvailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &infrav1.EdgeHost{
				ObjectMeta: metav1.ObjectMeta{Generation: tt.generation},
				Spec:       infrav1.EdgeHostSpec{ClaimRef: tt.claim},
				Status:     infrav1.EdgeHostStatus{AgentObservedGeneration: tt.observed, Provisioning: tt.prov},
			}
			if tt.generation == 3 && tt.claim == nil {
				// Released at generation 3 in these cases.
				h.Annotations = map[string]string{infrav1.ReleasedAtGenerationAnnotation: "3"}
			}
			if got := Phase(h); got != tt.want {
				t.Errorf("Phase() = %s, want %s", got, tt.want)
			}
			if got, want := IsClaimable(h), tt.want == infrav1.HostAvailable; got != want {
				t.Errorf("IsClaimable() = %v, want %v", got, want)
			}
		})
	}
}

func host(name string, lbls map[string]string) infrav1.EdgeHost {
	return infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbls, Generation: 1}}
}

func TestApprovalGatesClaims(t *testing.T) {
	for label, want := range map[string]bool{"": true, infrav1.ApprovalPending: false, "rejected": false, infrav1.ApprovalApproved: true} {
		h := host("h", nil)
		if label != "" {
			h.Labels = map[string]string{infrav1.ApprovalLabel: label}
		}
		if got := IsClaimable(&h); got != want {
			t.Errorf("approval %q: claimable %v, want %v", label, got, want)
		}
	}
}

func TestCordonGatesClaims(t *testing.T) {
	h := host("h", map[string]string{infrav1.CordonedLabel: "true"})
	if IsClaimable(&h) {
		t.Error("a cordoned host is claimable")
	}
}
