package get

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// kind is one thing `get` lists: the resource the API server serves its
// table for, and the typed list for the other output formats.
type kind struct {
	resource schema.GroupVersionResource
	newList  func() client.ObjectList
}

var kinds = map[string]kind{
	"clusters": {clusterv1.GroupVersion.WithResource("clusters"), func() client.ObjectList { return &clusterv1.ClusterList{} }},
	"machines": {infrav1.GroupVersion.WithResource("edgemachines"), func() client.ObjectList { return &infrav1.EdgeMachineList{} }},
	"hosts":    {infrav1.GroupVersion.WithResource("edgehosts"), func() client.ObjectList { return &infrav1.EdgeHostList{} }},
}

// Options is `kubectl fleet get`.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	PrintFlags    *genericclioptions.PrintFlags
	AllNamespaces bool
	Selector      string
	ShowLabels    bool

	kindArg string
	kind    kind
	format  string
	printer printers.ResourcePrinter
	conn    *kube.Connection
}

// NewOptions returns Options with kubectl's printing defaults.
func NewOptions(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *Options {
	return &Options{flags: flags, IOStreams: streams, PrintFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(kube.Scheme())}
}

// Complete takes the kind argument and builds the client.
func (o *Options) Complete(args []string) error {
	o.kindArg = args[0]
	if o.PrintFlags.OutputFormat != nil {
		o.format = *o.PrintFlags.OutputFormat
	}
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the kind, the selector and the output format.
func (o *Options) Validate() error {
	name := strings.ToLower(o.kindArg)
	switch strings.TrimSuffix(name, "s") {
	case "cluster":
		name = "clusters"
	case "machine", "edgemachine":
		name = "machines"
	case "host", "edgehost":
		name = "hosts"
	}
	k, ok := kinds[name]
	if !ok {
		return fmt.Errorf("unknown kind %q: want clusters, machines or hosts", o.kindArg)
	}
	o.kind = k
	if o.Selector != "" {
		if _, err := validate.Selector("--selector", o.Selector); err != nil {
			return err
		}
	}
	if o.format != "" && o.format != "wide" {
		p, err := o.PrintFlags.ToPrinter()
		if err != nil {
			return err
		}
		o.printer = p
	}
	return nil
}

// Run lists and prints.
func (o *Options) Run(ctx context.Context) error {
	if o.printer != nil {
		return o.printObjects(ctx)
	}
	table, err := o.serverTable()
	if err != nil {
		return err
	}
	if len(table.Rows) == 0 {
		if o.AllNamespaces {
			fmt.Fprintln(o.ErrOut, "No resources found")
		} else {
			fmt.Fprintf(o.ErrOut, "No resources found in %s namespace.\n", o.conn.Namespace)
		}
		return nil
	}
	wide := o.format == "wide"
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide, WithNamespace: o.AllNamespaces, ShowLabels: o.ShowLabels || wide}).
		PrintObj(table, o.Out)
}

// printObjects prints the typed objects for -o json|yaml|name|jsonpath….
func (o *Options) printObjects(ctx context.Context) error {
	opts := []client.ListOption{}
	if !o.AllNamespaces {
		opts = append(opts, client.InNamespace(o.conn.Namespace))
	}
	if o.Selector != "" {
		sel, err := validate.Selector("--selector", o.Selector)
		if err != nil {
			return err
		}
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	list := o.kind.newList()
	if err := o.conn.Client.List(ctx, list, opts...); err != nil {
		return o.conn.Explain(err)
	}
	if o.format != "name" {
		return o.printer.PrintObj(list, o.Out)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return fmt.Errorf("reading the list: %w", err)
	}
	for _, it := range items {
		if err := o.printer.PrintObj(it, o.Out); err != nil {
			return err
		}
	}
	return nil
}
