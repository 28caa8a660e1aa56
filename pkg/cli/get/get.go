package get

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is `kubectl fleet get`.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	PrintFlags    *genericclioptions.PrintFlags
	AllNamespaces bool
	Selector      string

	kind string
	conn *kube.Connection
	now  func() time.Time
}

// NewCmd returns `kubectl fleet get`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams, PrintFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(kube.Scheme()), now: time.Now}
	cmd := &cobra.Command{
		Use:       "get (clusters|machines|hosts)",
		Short:     "List clusters, machines or edge hosts as tables",
		ValidArgs: []string{"clusters", "machines", "hosts"},
		Args:      cobra.ExactArgs(1),
		Example: `  kubectl fleet get hosts
  kubectl fleet get hosts -A -l site=store-17 -o wide
  kubectl fleet get machines -o yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "List across all namespaces.")
	cmd.Flags().StringVarP(&o.Selector, "selector", "l", "", "Label selector (k=v,…).")
	o.PrintFlags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide, json, yaml or name."
	return cmd
}

// Complete checks the kind and connects.
func (o *Options) Complete(args []string) error {
	switch strings.TrimSuffix(strings.ToLower(args[0]), "s") {
	case "cluster":
		o.kind = "clusters"
	case "machine":
		o.kind = "machines"
	case "host", "edgehost":
		o.kind = "hosts"
	default:
		return fmt.Errorf("unknown kind %q: want clusters, machines or hosts", args[0])
	}
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Run lists and prints.
func (o *Options) Run(ctx context.Context) error {
	opts := []client.ListOption{}
	ns := o.conn.Namespace
	if !o.AllNamespaces {
		opts = append(opts, client.InNamespace(ns))
	}
	if o.Selector != "" {
		sel, err := metav1.ParseToLabelSelector(o.Selector)
		if err != nil {
			return fmt.Errorf("--selector: %w", err)
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return fmt.Errorf("--selector: %w", err)
		}
		opts = append(opts, client.MatchingLabelsSelector{Selector: s})
	}
	var list client.ObjectList
	switch o.kind {
	case "clusters":
		list = &clusterv1.ClusterList{}
	case "machines":
		list = &infrav1.EdgeMachineList{}
	default:
		list = &infrav1.EdgeHostList{}
	}
	if err := o.conn.Client.List(ctx, list, opts...); err != nil {
		return o.conn.Explain(err)
	}
	format := ""
	if o.PrintFlags.OutputFormat != nil {
		format = *o.PrintFlags.OutputFormat
	}
	if format != "" && format != "wide" {
		p, err := o.PrintFlags.ToPrinter()
		if err != nil {
			return err
		}
		if format != "name" {
			return p.PrintObj(list, o.Out)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := p.PrintObj(it, o.Out); err != nil {
				return err
			}
		}
		return nil
	}
	table, n := o.table(list, format == "wide")
	if n == 0 {
		if o.AllNamespaces {
			fmt.Fprintln(o.ErrOut, "No resources found")
		} else {
			fmt.Fprintf(o.ErrOut, "No resources found in %s namespace.\n", ns)
		}
		return nil
	}
	return printers.NewTablePrinter(printers.PrintOptions{Wide: format == "wide", WithNamespace: o.AllNamespaces}).PrintObj(table, o.Out)
}

func (o *Options) age(t metav1.Time) string { return duration.HumanDuration(o.now().Sub(t.Time)) }

func cond(conds []metav1.Condition, t string) string {
	for _, c := range conds {
		if c.Type == t {
			return string(c.Status)
		}
	}
	return "Unknown"
}

func (o *Options) table(list client.ObjectList, wide bool) (*metav1.Table, int) {
	t := &metav1.Table{}
	col := func(name string, priority int32) {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: name, Type: "string", Priority: priority})
	}
	add := func(obj runtime.Object, cells ...any) {
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: obj}})
	}
	switch l := list.(type) {
	case *clusterv1.ClusterList:
		for _, c := range []string{"Name", "Phase", "Endpoint", "Infrastructure", "Control-Plane", "Available", "Age"} {
			col(c, 0)
		}
		col("Version", 1)
		sort.Slice(l.Items, func(i, j int) bool {
			return l.Items[i].Namespace+l.Items[i].Name < l.Items[j].Namespace+l.Items[j].Name
		})
		for i := range l.Items {
			c := &l.Items[i]
			endpoint := "<none>"
			if c.Spec.ControlPlaneEndpoint.IsValid() {
				endpoint = fmt.Sprintf("%s:%d", c.Spec.ControlPlaneEndpoint.Host, c.Spec.ControlPlaneEndpoint.Port)
			}
			infra, cp := "false", "false"
			if c.Status.Initialization.InfrastructureProvisioned != nil && *c.Status.Initialization.InfrastructureProvisioned {
				infra = "true"
			}
			if c.Status.Initialization.ControlPlaneInitialized != nil && *c.Status.Initialization.ControlPlaneInitialized {
				cp = "true"
			}
			version := "<none>"
			if c.Spec.Topology.Version != "" {
				version = c.Spec.Topology.Version
			}
			add(c, c.Name, c.Status.Phase, endpoint, infra, cp, condClusterAvailable(c), o.age(c.CreationTimestamp), version)
		}
		return t, len(l.Items)
	case *infrav1.EdgeMachineList:
		for _, c := range []string{"Name", "Cluster", "Phase", "Host", "ProviderID", "Node", "Age"} {
			col(c, 0)
		}
		col("Addresses", 1)
		col("Cert-Expiry", 1)
		sort.Slice(l.Items, func(i, j int) bool {
			return l.Items[i].Namespace+l.Items[i].Name < l.Items[j].Namespace+l.Items[j].Name
		})
		for i := range l.Items {
			m := &l.Items[i]
			expiry := "<none>"
			if m.Status.CertificatesExpiryDate != nil {
				expiry = m.Status.CertificatesExpiryDate.UTC().Format("2006-01-02")
			}
			add(m, m.Name, orNone(m.Labels[clusterv1.ClusterNameLabel]), orNone(string(m.Status.Phase)), orNone(m.Status.HostRef),
				orNone(m.Spec.ProviderID), orNone(m.Status.NodeName), o.age(m.CreationTimestamp), addresses(m.Status.Addresses), expiry)
		}
		return t, len(l.Items)
	case *infrav1.EdgeHostList:
		for _, c := range []string{"Name", "Phase", "Claimed-By", "Connected", "Last-Seen", "Agent", "Age"} {
			col(c, 0)
		}
		for _, c := range []string{"Labels", "OS", "Arch", "Addresses"} {
			col(c, 1)
		}
		sort.Slice(l.Items, func(i, j int) bool {
			return l.Items[i].Namespace+l.Items[i].Name < l.Items[j].Namespace+l.Items[j].Name
		})
		for i := range l.Items {
			h := &l.Items[i]
			claimed := "<none>"
			if h.Spec.ClaimRef != nil {
				claimed = h.Spec.ClaimRef.Name
			}
			seen := "<never>"
			if h.Status.LastSeenTime != nil {
				seen = o.age(*h.Status.LastSeenTime) + " ago"
			}
			add(h, h.Name, orNone(string(h.Status.Phase)), claimed, cond(h.Status.Conditions, infrav1.AgentConnectedCondition), seen,
				orNone(h.Status.Facts.AgentVersion), o.age(h.CreationTimestamp),
				kube.LabelString(h.Labels), orNone(h.Status.Facts.OS), orNone(h.Status.Facts.Arch), addresses(h.Status.Addresses))
		}
		return t, len(l.Items)
	}
	return t, 0
}

func condClusterAvailable(c *clusterv1.Cluster) string {
	for _, cd := range c.Status.Conditions {
		if cd.Type == clusterv1.AvailableCondition {
			return string(cd.Status)
		}
	}
	return "Unknown"
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func addresses(a infrav1.MachineAddresses) string {
	var out []string
	for _, x := range a {
		if x.Type == infrav1.MachineInternalIP || x.Type == infrav1.MachineExternalIP {
			out = append(out, x.Address)
		}
	}
	if len(out) == 0 {
		return "<none>"
	}
	return strings.Join(out, ",")
}
