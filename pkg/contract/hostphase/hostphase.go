package hostphase

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Phase computes a host's phase from its spec and its agent's report alone,
// so it can be rebuilt at any time (after a restore or clusterctl move).
func Phase(h *infrav1.EdgeHost) infrav1.EdgeHostPhase {
	p := h.Status.Provisioning
	if claim := h.Spec.ClaimRef; claim != nil {
		if p == nil || p.ClaimUID != claim.UID {
			return infrav1.HostClaimed
		}
		switch p.State {
		case infrav1.ProvisioningSucceeded:
			return infrav1.HostProvisioned
		case infrav1.ProvisioningFailed, infrav1.ProvisioningResetFailed:
			return infrav1.HostNeedsAttention
		default:
			return infrav1.HostProvisioning
		}
	}
	if p != nil {
		if p.State == infrav1.ProvisioningResetFailed || HoldsUnknownWorkload(h) {
			return infrav1.HostNeedsAttention
		}
		return infrav1.HostDeprovisioning
	}
	// A released host stays dirty until its agent has seen the release: the
	// agent may have begun the assignment without reporting it yet.
	if g := ReleasedAtGeneration(h); g > 0 && h.Status.AgentObservedGeneration < g {
		return infrav1.HostDeprovisioning
	}
	return infrav1.HostAvailable
}

// ReleasedAtGeneration is the generation of the host's last release, or 0.
// A release recorded by another incarnation of the EdgeHost (restored from
// a backup: a new uid, generations from 1 again) says nothing of this one.
func ReleasedAtGeneration(h *infrav1.EdgeHost) int64 {
	g, err := strconv.ParseInt(h.Annotations[infrav1.ReleasedAtGenerationAnnotation], 10, 64)
	if err != nil || g > h.Generation {
		return 0
	}
	if _, uid, ok := releasedClaim(h); ok && uid != "" && uid != h.UID {
		return 0
	}
	return g
}

// releasedClaim parses ReleasedClaimAnnotation.
func releasedClaim(h *infrav1.EdgeHost) (claim, hostUID types.UID, ok bool) {
	v, found := h.Annotations[infrav1.ReleasedClaimAnnotation]
	if !found {
		return "", "", false
	}
	c, u, _ := strings.Cut(strings.TrimSpace(v), " ")
	return types.UID(c), types.UID(u), true
}

// HoldsUnknownWorkload reports whether an unclaimed host's agent runs a
// workload the hub never released: the claim is unknown to a hub restored
// from a backup older than it, or cleared by hand. Such a workload is never
// deprovisioned on the hub's own initiative; recording its release
// (ReleasedClaimAnnotation) is the operator's order to reset it. Hosts
// released before the claim was recorded keep being deprovisioned.
func HoldsUnknownWorkload(h *infrav1.EdgeHost) bool {
	p := h.Status.Provisioning
	if h.Spec.ClaimRef != nil || p == nil {
		return false
	}
	claim, _, ok := releasedClaim(h)
	if !ok {
		_, legacy := h.Annotations[infrav1.ReleasedAtGenerationAnnotation]
		return !legacy
	}
	return claim != p.ClaimUID
}

// IsClaimable reports whether a host may be given to a new machine: free,
// clean, not going away, not cordoned, and not waiting for an operator's
// approval.
func IsClaimable(h *infrav1.EdgeHost) bool {
	approval, gated := h.Labels[infrav1.ApprovalLabel]
	return h.DeletionTimestamp.IsZero() && h.Spec.ClaimRef == nil && Phase(h) == infrav1.HostAvailable &&
		(!gated || approval == infrav1.ApprovalApproved) && h.Labels[infrav1.CordonedLabel] != "true"
}

// IsReleased reports whether nothing holds the host and the agent has left
// it clean, the condition for letting a host be deleted.
func IsReleased(h *infrav1.EdgeHost) bool {
	return h.Spec.ClaimRef == nil && Phase(h) == infrav1.HostAvailable
}
