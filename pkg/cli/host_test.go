package cli_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func TestHostCommandsAndCompletion(t *testing.T) {
	ctx := context.Background()
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: "hosts", Name: "gated-1",
		Labels: map[string]string{infrav1.ApprovalLabel: infrav1.ApprovalPending}}}
	if err := env.Client.Create(ctx, h); err != nil {
		t.Fatal(err)
	}
	get := func() map[string]string {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			t.Fatal(err)
		}
		return h.Labels
	}
	if out, _, err := fleet(t, "host", "approve", "gated-1"); err != nil || !strings.Contains(out, "edgehost/gated-1 approved") ||
		get()[infrav1.ApprovalLabel] != infrav1.ApprovalApproved {
		t.Fatalf("approve: %v %q %v", err, out, h.Labels)
	}
	if _, _, err := fleet(t, "host", "cordon", "gated-1"); err != nil || get()[infrav1.CordonedLabel] != "true" {
		t.Fatalf("cordon: %v %v", err, h.Labels)
	}
	if _, _, err := fleet(t, "host", "uncordon", "gated-1"); err != nil {
		t.Fatal(err)
	}
	if _, cordoned := get()[infrav1.CordonedLabel]; cordoned {
		t.Fatal("uncordon left the label")
	}
	if _, _, err := fleet(t, "host", "cordon", "ghost"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown host: %v", err)
	}
	// Shell completion lists the namespace's hosts.
	out, _, err := fleet(t, "__complete", "host", "cordon", "gat")
	if err != nil || !strings.Contains(out, "gated-1") {
		t.Errorf("completion: %v %q", err, out)
	}
}
