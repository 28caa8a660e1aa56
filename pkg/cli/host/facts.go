package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// FactsOptions is `kubectl fleet host facts`.
type FactsOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name   string
	Output string

	conn *kube.Connection
}

// Complete takes the host name and builds the client.
func (o *FactsOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and -o.
func (o *FactsOptions) Validate() error {
	switch o.Output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf("--output %q: want json or yaml (or none, for a summary)", o.Output)
	}
	return validate.HostName(o.Name)
}

// Run asks the host's agent, through the hub, and prints its answer.
func (o *FactsOptions) Run(ctx context.Context) error {
	raw, err := accessRequest(o.conn, o.Name, hostaccess.SubresourceFacts).DoRaw(ctx)
	if err != nil {
		return explainAccess(o.conn, o.Name, "facts", err)
	}
	f := &hostaccess.EdgeHostFacts{}
	if err := json.Unmarshal(raw, f); err != nil {
		return fmt.Errorf("reading the facts of edgehost/%s: %w", o.Name, err)
	}
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(f, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.Out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(f)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	return printFacts(o.Out, f, time.Now())
}

func printFacts(out io.Writer, f *hostaccess.EdgeHostFacts, now time.Time) error {
	r := f.Report
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	ago := func(t time.Time) string { return duration.HumanDuration(now.Sub(t)) }
	fmt.Fprintf(w, "Name:\t%s\n", f.Name)
	fmt.Fprintf(w, "Namespace:\t%s\n", f.Namespace)
	fmt.Fprintf(w, "Observed:\t%s\n", f.Observed.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Hostname:\t%s\n", r.Facts.Hostname)
	fmt.Fprintf(w, "Machine ID:\t%s\n", r.Facts.MachineID)
	fmt.Fprintf(w, "OS:\t%s\n", r.Facts.OS)
	fmt.Fprintf(w, "Kernel:\t%s\n", r.Kernel)
	fmt.Fprintf(w, "Architecture:\t%s, %d CPUs, %s memory\n", r.Facts.Arch, r.Facts.CPUs, bytesIEC(r.Facts.MemoryBytes))
	if r.BootTime != nil {
		fmt.Fprintf(w, "Booted:\t%s (%s ago)\n", r.BootTime.UTC().Format(time.RFC3339), ago(r.BootTime.Time))
	}
	agent := r.Facts.AgentVersion
	if r.AgentStarted != nil {
		agent += fmt.Sprintf(", running for %s", ago(r.AgentStarted.Time))
	}
	fmt.Fprintf(w, "Agent:\t%s\n", agent)
	k := r.KubernetesVersion
	if k == "" {
		k = "<not provisioned>"
	}
	if len(r.Facts.KubernetesVersions) > 0 {
		k += " (staged: " + strings.Join(r.Facts.KubernetesVersions, ", ") + ")"
	}
	fmt.Fprintf(w, "Kubernetes:\t%s\n", k)
	if p := r.Provisioning; p != nil {
		line := string(p.State)
		if p.Step != "" {
			line += " at " + p.Step
		}
		fmt.Fprintf(w, "Workload:\t%s\n", line)
	} else {
		fmt.Fprintf(w, "Workload:\t<none: the host is clean>\n")
	}
	if l := r.Link; l != nil {
		fmt.Fprintf(w, "Link:\t%s\n", linkLine(l))
	}
	_ = w.Flush()

	fmt.Fprintf(out, "Interfaces:\n")
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "  NAME\tSTATE\tMAC\tADDRESSES\n")
	for _, i := range r.Interfaces {
		state := "down"
		if i.Up {
			state = "up"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", i.Name, state, dash(i.MAC), dash(strings.Join(i.Addresses, ", ")))
	}
	_ = w.Flush()
	fmt.Fprintf(out, "Disks:\n")
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "  MOUNT\tDEVICE\tTYPE\tSIZE\tAVAILABLE\n")
	for _, d := range r.Disks {
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", d.Mount, d.Device, d.Type, bytesIEC(d.SizeBytes), bytesIEC(d.AvailBytes))
	}
	_ = w.Flush()
	fmt.Fprintf(out, "Certificates:\n")
	if len(r.Certificates) == 0 {
		fmt.Fprintf(out, "  <none>\n")
		return nil
	}
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintf(w, "  PATH\tSUBJECT\tNOT AFTER\tLEFT\n")
	for _, c := range r.Certificates {
		left := "expired"
		if c.NotAfter.After(now) {
			left = duration.HumanDuration(c.NotAfter.Sub(now))
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", c.Path, dash(c.Subject), c.NotAfter.UTC().Format(time.RFC3339), left)
	}
	return w.Flush()
}

func linkLine(l *infrav1.LinkHealth) string {
	line := fmt.Sprintf("%d TCP retransmissions (%d to the hub), %d packet drops in %ds", l.TCPRetransmits,
		l.TCPRetransmitsToHub, l.PacketDrops, l.WindowSeconds)
	if l.HubRTTMilliseconds != nil {
		line += fmt.Sprintf("; %d ms to the hub", *l.HubRTTMilliseconds)
	}
	if l.Probe != infrav1.LinkProbeRunning && l.Message != "" {
		line += " (probe " + string(l.Probe) + ": " + l.Message + ")"
	}
	return line
}

// bytesIEC is n in the largest binary unit that keeps it ≥ 1, one decimal.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
