package agent

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/release"
)

// UpgradeOptions is `kubectl fleet agent upgrade`.
type UpgradeOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Version          string
	Selector         string
	Name             string
	Canary           int32
	WaveSize         string
	MaxUnavailable   string
	GroupBy          string
	SuccessThreshold string
	TrialDeadline    time.Duration
	RequireApproval  bool
	Wait             bool
	Timeout          time.Duration

	selector   *metav1.LabelSelector
	waveSize   intstr.IntOrString
	maxUnavail intstr.IntOrString
	threshold  intstr.IntOrString
	conn       *kube.Connection
}

// Complete builds the client.
func (o *UpgradeOptions) Complete([]string) error {
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks every flag before anything is created, and names every
// bad one at once.
func (o *UpgradeOptions) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.Version == "" {
		bad("--version is required, e.g. --version v0.9.2")
	} else if _, err := release.Compare(o.Version, o.Version); err != nil || !strings.HasPrefix(o.Version, "v") {
		bad("--version %q: want vMAJOR.MINOR.PATCH, e.g. v0.9.2", o.Version)
	}
	var err error
	if o.selector, err = validate.LabelSelector("-l", o.Selector); err != nil {
		errs = append(errs, err)
	}
	if o.Name == "" && o.Version != "" {
		o.Name = "agent-" + nameSafe.ReplaceAllString(strings.ToLower(o.Version), "-") + "-" + rand.String(5)
	}
	if o.Name != "" {
		errs = append(errs, validate.RolloutName(o.Name))
	}
	if o.Canary < 0 {
		bad("--canary %d: want 0 or more", o.Canary)
	}
	for _, f := range []struct {
		flag, v string
		into    *intstr.IntOrString
		least   int
	}{{"--wave-size", o.WaveSize, &o.waveSize, 1}, {"--max-unavailable", o.MaxUnavailable, &o.maxUnavail, 1}, {"--success-threshold", o.SuccessThreshold, &o.threshold, 1}} {
		v, err := countOrPercent(f.v, f.least)
		if err != nil {
			bad("%s %q: %v", f.flag, f.v, err)
		}
		*f.into = v
	}
	if e := validation.IsQualifiedName(o.GroupBy); len(e) > 0 {
		bad("--group-by %q is not a label key: %s", o.GroupBy, strings.Join(e, "; "))
	}
	if o.TrialDeadline < 10*time.Second {
		bad("--trial-deadline %s: want at least 10s (a new agent must reconnect in it)", o.TrialDeadline)
	}
	if o.Wait && o.Timeout <= 0 {
		bad("--timeout %s: want a positive duration", o.Timeout)
	}
	return validate.Join(errs...)
}

// nameSafe matches what an object name cannot hold.
var nameSafe = regexp.MustCompile(`[^a-z0-9-]+`)

// countOrPercent parses "3" or "25%".
func countOrPercent(s string, least int) (intstr.IntOrString, error) {
	v := intstr.Parse(s)
	if v.Type == intstr.String {
		p, err := intstr.GetScaledValueFromIntOrPercent(&v, 100, false)
		if err != nil || !strings.HasSuffix(s, "%") {
			return v, fmt.Errorf("want a number or a percentage such as 25%%")
		}
		if p < least || p > 100 {
			return v, fmt.Errorf("want a percentage from %d%% to 100%%", least)
		}
		return v, nil
	}
	if v.IntValue() < least {
		return v, fmt.Errorf("want at least %d", least)
	}
	return v, nil
}

// Run checks that the release exists and hosts are selected, creates the
// roll-out, and with --wait follows it.
func (o *UpgradeOptions) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	rels := &infrav1.EdgeAgentReleaseList{}
	if err := c.List(ctx, rels, kube.InNamespace(ns)); err != nil {
		return o.conn.Explain(err)
	}
	var have []string
	found := false
	for _, r := range rels.Items {
		have = append(have, r.Spec.Version)
		found = found || r.Spec.Version == o.Version
	}
	if !found {
		known := "none"
		if len(have) > 0 {
			known = strings.Join(have, ", ")
		}
		return fmt.Errorf("no EdgeAgentRelease of namespace %s has fleet-agent %s (it has: %s); publish the signed release first (docs/AGENT-RELEASES.md); nothing was changed", ns, o.Version, known)
	}
	hosts := &infrav1.EdgeHostList{}
	opts := []kube.ListOption{kube.InNamespace(ns)}
	if o.selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(o.selector)
		if err != nil {
			return fmt.Errorf("-l %q: %w", o.Selector, err)
		}
		opts = append(opts, kube.MatchingLabelsSelector{Selector: sel})
	}
	if err := c.List(ctx, hosts, opts...); err != nil {
		return o.conn.Explain(err)
	}
	if len(hosts.Items) == 0 {
		return fmt.Errorf("no EdgeHost of namespace %s matches %s; nothing was changed", ns, selectorText(o.Selector))
	}
	ro := &infrav1.EdgeAgentRollout{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: ns},
		Spec: infrav1.EdgeAgentRolloutSpec{Version: o.Version, Selector: o.selector, Canary: &o.Canary, WaveSize: &o.waveSize,
			SuccessThreshold: &o.threshold, MaxUnavailable: &o.maxUnavail, GroupBy: o.GroupBy,
			TrialDeadline: &metav1.Duration{Duration: o.TrialDeadline}, RequireApproval: o.RequireApproval},
	}
	if err := c.Create(ctx, ro); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("edgeagentrollout/%s exists already: pick another --name", o.Name)
		}
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgeagentrollout/%s created: %d hosts to fleet-agent %s\n", o.Name, len(hosts.Items), o.Version)
	if !o.Wait {
		fmt.Fprintf(o.Out, "follow it with: kubectl fleet describe rollout %s\n", o.Name)
		return nil
	}
	return progress.Until(ctx, o.Out, o.Timeout, "edgeagentrollout/"+o.Name, Watch(c, ns, o.Name, infrav1.AgentRolloutComplete))
}

func selectorText(s string) string {
	if s == "" {
		return "any selector"
	}
	return "-l " + s
}

// Watch is a progress check on a roll-out until it reaches phase; a
// roll-out that ends elsewhere is an error.
func Watch(c *kube.Client, ns, name string, phase infrav1.AgentRolloutPhase) progress.Check {
	return func(ctx context.Context) (string, bool, error) {
		ro := &infrav1.EdgeAgentRollout{}
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
			return "", false, err
		}
		line := Line(ro)
		switch p := ro.Status.Phase; p {
		case phase:
			return line, true, nil
		case infrav1.AgentRolloutFailed, infrav1.AgentRolloutAborted:
			return line, false, fmt.Errorf("edgeagentrollout/%s %s: %s", name, p, conditionMessage(ro))
		}
		return line, false, nil
	}
}

// Line is a roll-out in one line: its phase and its current wave.
func Line(ro *infrav1.EdgeAgentRollout) string {
	s := ro.Status
	line := fmt.Sprintf("%s: %d of %d hosts on %s", orPending(string(s.Phase)), s.Updated, s.Hosts, ro.Spec.Version)
	if s.Failed > 0 {
		line += fmt.Sprintf(", %d failed", s.Failed)
	}
	if i := int(s.CurrentWave); i < len(s.Waves) {
		w := s.Waves[i]
		line += fmt.Sprintf("; wave %s (%d/%d) %s %d/%d", w.Name, i+1, len(s.Waves), w.State, w.Updated, w.Planned)
		if w.Message != "" {
			line += ": " + w.Message
		}
	}
	return line
}

func orPending(p string) string {
	if p == "" {
		return "Pending"
	}
	return p
}

func conditionMessage(ro *infrav1.EdgeAgentRollout) string {
	for _, c := range ro.Status.Conditions {
		if c.Type == "Progressing" {
			return c.Message
		}
	}
	return ""
}
