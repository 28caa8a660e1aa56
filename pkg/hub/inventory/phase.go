package inventory

import (
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Zone is the host's failure domain, or "".
func Zone(h *infrav1.EdgeHost) string {
	return h.Labels[infrav1.ZoneLabel]
}

// IsInterruptible reports whether the host is labelled interruptible.
func IsInterruptible(h *infrav1.EdgeHost) bool {
	return h.Labels[infrav1.InterruptibleLabel] == "true"
}
