package cli_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// agent upgrade makes the EdgeAgentRollout its flags describe; pause,
// resume and abort change it, and what does not apply is refused.
func TestAgentUpgradeAndItsControls(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "agent")
	newHost(t, ns, "kiosk-1", map[string]string{"site": "a"})
	newHost(t, ns, "kiosk-2", map[string]string{"site": "b"})
	if err := env.Client.Create(ctx, &infrav1.EdgeAgentRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet-agent-v0-9-2"},
		Spec: infrav1.EdgeAgentReleaseSpec{Version: "v0.9.2", Artifacts: []infrav1.AgentArtifact{{Arch: "amd64", URL: "https://r.example/a", Bundle: "{}"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fleet(t, "-n", ns, "agent", "upgrade", "--version", "v0.9.2", "-l", "site=c"); err == nil ||
		!strings.Contains(err.Error(), "no EdgeHost of namespace "+ns+" matches -l site=c; nothing was changed") {
		t.Fatalf("a selector of no host: %v", err)
	}
	out, _, err := fleet(t, "-n", ns, "agent", "upgrade", "--version", "v0.9.2", "--name", "r1", "-l", "site in (a,b)",
		"--max-unavailable", "1", "--wave-size", "10%", "--group-by", "site", "--trial-deadline", "2m")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "edgeagentrollout/r1 created: 2 hosts to fleet-agent v0.9.2") {
		t.Fatalf("printed:\n%s", out)
	}
	ro := &infrav1.EdgeAgentRollout{}
	get := func() {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r1"}, ro); err != nil {
			t.Fatal(err)
		}
	}
	get()
	sp := ro.Spec
	if sp.Version != "v0.9.2" || *sp.MaxUnavailable != intstr.FromInt32(1) || *sp.WaveSize != intstr.FromString("10%") || sp.GroupBy != "site" ||
		sp.TrialDeadline.Duration.String() != "2m0s" || *sp.Canary != 1 || sp.Selector == nil || len(sp.Selector.MatchExpressions) != 1 {
		t.Fatalf("spec %+v", sp)
	}
	for _, step := range []struct {
		args  []string
		check func() bool
		err   string
	}{
		{[]string{"pause", "r1"}, func() bool { return ro.Spec.Paused }, ""},
		{[]string{"resume", "r1"}, func() bool { return !ro.Spec.Paused }, ""},
		{[]string{"approve", "r1"}, nil, "edgeagentrollout/r1 does not require approval"},
		{[]string{"abort", "r1"}, func() bool { return ro.Spec.Abort }, ""},
		{[]string{"pause", "r1"}, nil, "edgeagentrollout/r1 was aborted; an aborted roll-out cannot pause"},
	} {
		_, _, err := fleet(t, append([]string{"-n", ns, "agent"}, step.args...)...)
		if step.err != "" {
			if err == nil || !strings.Contains(err.Error(), step.err) {
				t.Fatalf("agent %v: %v, want %q", step.args, err, step.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("agent %v: %v", step.args, err)
		}
		get()
		if !step.check() {
			t.Fatalf("agent %v: spec %+v", step.args, ro.Spec)
		}
	}
	out, _, err = fleet(t, "-n", ns, "get", "rollouts")
	if err != nil || !strings.Contains(out, "r1") || !strings.Contains(out, "v0.9.2") {
		t.Fatalf("get rollouts: %v\n%s", err, out)
	}
}

// Pause and resume land while something else keeps writing the roll-out's
// status, as its controller does during a wave: a status write is not an
// operator's change and must not refuse the command.
func TestAgentControlsOutlastStatusWrites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ns := newNamespace(t, "agentrace")
	ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.2", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"site": "none"}}}}
	if err := env.Client.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	writer := make(chan struct{})
	go func() {
		defer close(writer)
		for n := int32(0); ctx.Err() == nil; n++ {
			cur := &infrav1.EdgeAgentRollout{}
			if env.Client.Get(ctx, client.ObjectKeyFromObject(ro), cur) != nil {
				continue
			}
			cur.Status.Hosts = 1000 + n%7
			_ = env.Client.Status().Update(ctx, cur)
		}
	}()
	defer func() { cancel(); <-writer }()
	for i := range 10 {
		action, want := "pause", true
		if i%2 == 1 {
			action, want = "resume", false
		}
		if _, _, err := fleet(t, "-n", ns, "agent", action, "r1"); err != nil {
			t.Fatalf("agent %s (round %d): %v", action, i, err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			t.Fatal(err)
		}
		if ro.Spec.Paused != want {
			t.Fatalf("agent %s (round %d): paused=%v", action, i, ro.Spec.Paused)
		}
	}
}
