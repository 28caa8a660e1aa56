package describe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// RolloutOptions is `kubectl fleet describe rollout`.
type RolloutOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name   string
	Output string
	Now    func() time.Time

	conn *kube.Connection
}

// Complete takes the roll-out's name and builds the client.
func (o *RolloutOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and -o.
func (o *RolloutOptions) Validate() error {
	if o.Output != "" && o.Output != "json" && o.Output != "yaml" {
		return fmt.Errorf("-o %q: want json or yaml", o.Output)
	}
	return validate.RolloutName(o.Name)
}

// Run prints the roll-out, its waves and the hosts it moves.
func (o *RolloutOptions) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	ro := &infrav1.EdgeAgentRollout{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("edgeagentrollout %q not found in namespace %s (see `kubectl fleet get rollouts`)", o.Name, ns)
		}
		return o.conn.Explain(err)
	}
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(ro, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.Out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(ro)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	hosts := &infrav1.EdgeHostList{}
	if err := c.List(ctx, hosts, kube.InNamespace(ns)); err != nil {
		return o.conn.Explain(err)
	}
	return WriteRollout(o.Out, ro, hosts.Items, o.Now())
}

// WriteRollout prints a roll-out as `kubectl describe` would, with a
// table of its waves and one of its hosts that are not done.
func WriteRollout(out io.Writer, ro *infrav1.EdgeAgentRollout, hosts []infrav1.EdgeHost, now time.Time) error {
	s, sp := ro.Status, ro.Spec
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	sel := "every host of the namespace"
	if sp.Selector != nil {
		if ls, err := metav1.LabelSelectorAsSelector(sp.Selector); err == nil {
			sel = ls.String()
		}
	}
	fmt.Fprintf(w, "Name:\t%s\nNamespace:\t%s\nVersion:\t%s\nSelector:\t%s\n", ro.Name, ro.Namespace, sp.Version, sel)
	fmt.Fprintf(w, "Phase:\t%s\n", dash(string(s.Phase)))
	fmt.Fprintf(w, "Hosts:\t%d (%d on %s, %d failed)\n", s.Hosts, s.Updated, sp.Version, s.Failed)
	fmt.Fprintf(w, "Policy:\tcanary %d, waves of %s, at most %s per %s moving, success threshold %s, trial %s%s%s\n",
		deref(sp.Canary, 1), intOrString(sp.WaveSize, "25%"), intOrString(sp.MaxUnavailable, "25%"), orDefault(sp.GroupBy, infrav1.ZoneLabel),
		intOrString(sp.SuccessThreshold, "100%"), trial(sp.TrialDeadline), flag(sp.RequireApproval, ", approval before each wave"), flag(sp.Paused, ", paused"))
	if s.StartTime != nil {
		fmt.Fprintf(w, "Started:\t%s ago\n", ago(s.StartTime.Time, now))
	}
	if s.CompletionTime != nil {
		fmt.Fprintf(w, "Ended:\t%s ago\n", ago(s.CompletionTime.Time, now))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "Waves:")
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  WAVE\tSTATE\tHOSTS\tUPDATED\tFAILED\tREVERTED\tSTARTED\tMESSAGE")
	for i, wv := range s.Waves {
		mark := " "
		if int32(i) == s.CurrentWave {
			mark = "*"
		}
		started := "-"
		if wv.StartTime != nil {
			started = ago(wv.StartTime.Time, now) + " ago"
		}
		fmt.Fprintf(w, "%s %s\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\n", mark, wv.Name, wv.State, wv.Hosts, wv.Planned, wv.Updated, wv.Failed, wv.Reverted, started, dash(wv.Message))
	}
	if len(s.Waves) == 0 {
		fmt.Fprintln(w, "  (not planned yet)")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	var rows []string
	for i := range hosts {
		h := &hosts[i]
		o := infrav1.AgentReleaseOrderOf(h)
		if o == nil || o.Rollout != ro.Name || h.Status.Facts.AgentVersion == o.Version {
			continue
		}
		rows = append(rows, fmt.Sprintf("  %s\t%s\t%s\t%s\t%s\t%s", h.Name, waveOf(s.Waves, o.Wave), dash(o.From), dash(h.Status.Facts.AgentVersion),
			orderLabel(o), hostDetail(h, o)))
	}
	if len(rows) > 0 {
		sort.Strings(rows)
		fmt.Fprintln(out, "Hosts not done:")
		w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "  HOST\tWAVE\tFROM\tRUNS\tORDER\tDETAIL")
		for _, r := range rows {
			fmt.Fprintln(w, r)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "Conditions:")
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "  TYPE\tSTATUS\tREASON\tMESSAGE")
	for _, c := range s.Conditions {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, oneLine(c.Message))
	}
	return w.Flush()
}

func orderLabel(o *infrav1.AgentReleaseOrder) string {
	if o.Revert {
		return "back to " + o.Version
	}
	return "to " + o.Version
}

// hostDetail says where a host that is not done stands.
func hostDetail(h *infrav1.EdgeHost, o *infrav1.AgentReleaseOrder) string {
	var parts []string
	if r := h.Status.AgentRelease; r != nil {
		if t := r.Transfer; t != nil && t.Version == o.Version {
			switch t.State {
			case infrav1.AgentTransferRefused:
				parts = append(parts, "refused ("+t.Reason+"): "+t.Message)
			default:
				parts = append(parts, fmt.Sprintf("fetching %d of %d bytes", t.Bytes, t.TotalBytes))
			}
		}
		if t := r.LastTrial; t != nil && t.Version == o.Version && t.State == infrav1.AgentTrialRolledBack {
			parts = append(parts, "rolled back: "+t.Reason)
		}
	} else {
		parts = append(parts, "its agent cannot update itself")
	}
	if !isConnected(h) {
		parts = append(parts, "agent not connected")
	}
	if len(parts) == 0 {
		return "waiting for its agent"
	}
	return oneLine(strings.Join(parts, "; "))
}

func isConnected(h *infrav1.EdgeHost) bool {
	for _, c := range h.Status.Conditions {
		if c.Type == infrav1.AgentConnectedCondition {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func waveOf(waves []infrav1.AgentRolloutWave, i int32) string {
	if int(i) < len(waves) {
		return waves[i].Name
	}
	return fmt.Sprint(i)
}

func ago(t, now time.Time) string { return duration.HumanDuration(now.Sub(t)) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func flag(b bool, s string) string {
	if b {
		return s
	}
	return ""
}

func deref(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

func trial(d *metav1.Duration) string {
	if d == nil {
		return "5m0s"
	}
	return d.Duration.String()
}

func intOrString(v *intstr.IntOrString, def string) string {
	if v == nil {
		return def
	}
	return v.String()
}
