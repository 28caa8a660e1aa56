package get

import (
	"context"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// kind is one thing `get` lists: its kind, the resource the API server
// serves its table for, and the typed list for the other output formats.
type kind struct {
	gvk      schema.GroupVersionKind
	resource schema.GroupVersionResource
	newList  func() kube.ObjectList
}

func newKind(gvk schema.GroupVersionKind, newList func() kube.ObjectList) kind {
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	return kind{gvk: gvk, resource: gvr, newList: newList}
}

var kinds = map[string]kind{
	"clusters": newKind(clusterv1.GroupVersion.WithKind("Cluster"), func() kube.ObjectList { return &clusterv1.ClusterList{} }),
	"machines": newKind(infrav1.GroupVersion.WithKind("EdgeMachine"), func() kube.ObjectList { return &infrav1.EdgeMachineList{} }),
	"hosts":    newKind(infrav1.GroupVersion.WithKind("EdgeHost"), func() kube.ObjectList { return &infrav1.EdgeHostList{} }),
	"rollouts": newKind(infrav1.GroupVersion.WithKind("EdgeAgentRollout"), func() kube.ObjectList { return &infrav1.EdgeAgentRolloutList{} }),
	"releases": newKind(infrav1.GroupVersion.WithKind("EdgeAgentRelease"), func() kube.ObjectList { return &infrav1.EdgeAgentReleaseList{} }),
}

// Options is `kubectl fleet get`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	PrintFlags    *kube.PrintFlags
	AllNamespaces bool
	Selector      string
	ShowLabels    bool
	NoHeaders     bool
	SortBy        string
	Watch         bool

	kindArg string
	kind    kind
	format  string
	printer printers.ResourcePrinter
	sorter  *sorter
	tabs    interface {
		io.Writer
		Flush() error
	}
	conn *kube.Connection
}

// NewOptions returns Options with kubectl's printing defaults.
func NewOptions(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *Options {
	return &Options{flags: flags, IOStreams: streams, PrintFlags: kube.NewPrintFlags(kube.Scheme())}
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
	case "rollout", "edgeagentrollout", "agentrollout":
		name = "rollouts"
	case "release", "edgeagentrelease", "agentrelease":
		name = "releases"
	}
	k, ok := kinds[name]
	if !ok {
		return fmt.Errorf("unknown kind %q: want clusters, machines, hosts, rollouts or releases", o.kindArg)
	}
	o.kind = k
	if o.Selector != "" {
		if _, err := validate.Selector("--selector", o.Selector); err != nil {
			return err
		}
	}
	if o.SortBy != "" {
		var err error
		if o.sorter, err = newSorter(o.SortBy); err != nil {
			return err
		}
	}
	if !o.tables() {
		p, err := o.PrintFlags.ToPrinter()
		if err != nil {
			return err
		}
		o.printer = p
	}
	return nil
}

// Run lists and prints, then with --watch prints every change until the
// API server ends the watch or ctx ends (Ctrl-C).
func (o *Options) Run(ctx context.Context) error {
	var rv string
	var err error
	if o.tables() {
		rv, err = o.printTable(ctx)
	} else {
		rv, err = o.printObjects(ctx)
	}
	if err != nil || !o.Watch {
		return err
	}
	return o.watch(ctx, rv)
}

// printTable prints the API server's table, sorted with --sort-by, and
// keeps its printer for --watch: a table printer prints its header once.
func (o *Options) printTable(ctx context.Context) (string, error) {
	table, err := o.serverTable(ctx)
	if err != nil {
		return "", err
	}
	if o.sorter != nil {
		err := o.sorter.sort(len(table.Rows), func(i int) map[string]any { return rowObject(table.Rows[i]) },
			func(i, j int) { table.Rows[i], table.Rows[j] = table.Rows[j], table.Rows[i] })
		if err != nil {
			return "", err
		}
	}
	if len(table.Rows) == 0 && !o.Watch {
		if o.AllNamespaces {
			fmt.Fprintln(o.ErrOut, "No resources found")
		} else {
			fmt.Fprintf(o.ErrOut, "No resources found in %s namespace.\n", o.conn.Namespace)
		}
		return table.ResourceVersion, nil
	}
	wide := o.format == "wide"
	o.printer = printers.NewTablePrinter(printers.PrintOptions{Wide: wide, WithNamespace: o.AllNamespaces,
		ShowLabels: o.ShowLabels || wide, NoHeaders: o.NoHeaders})
	return table.ResourceVersion, o.print(table)
}

// printObjects prints the typed objects for -o json|yaml|name|jsonpath…,
// the items one by one with --watch (as kubectl get -w does).
func (o *Options) printObjects(ctx context.Context) (string, error) {
	opts := []kube.ListOption{}
	if !o.AllNamespaces {
		opts = append(opts, kube.InNamespace(o.conn.Namespace))
	}
	if o.Selector != "" {
		sel, err := validate.Selector("--selector", o.Selector)
		if err != nil {
			return "", err
		}
		opts = append(opts, kube.MatchingLabelsSelector{Selector: sel})
	}
	list := o.kind.newList()
	if err := o.conn.Client.List(ctx, list, opts...); err != nil {
		return "", o.conn.Explain(err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", fmt.Errorf("reading the list: %w", err)
	}
	if o.sorter != nil {
		if err := o.sortObjects(items); err != nil {
			return "", err
		}
		if err := meta.SetList(list, items); err != nil {
			return "", fmt.Errorf("sorting the list: %w", err)
		}
	}
	if o.format != "name" && !o.Watch {
		return list.GetResourceVersion(), o.print(list)
	}
	for _, it := range items {
		if err := o.print(it); err != nil {
			return "", err
		}
	}
	return list.GetResourceVersion(), nil
}

// sortObjects sorts typed objects by --sort-by, reading them as JSON as
// the API server serves them.
func (o *Options) sortObjects(items []runtime.Object) error {
	maps := make([]map[string]any, len(items))
	for i, it := range items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(it)
		if err != nil {
			return fmt.Errorf("sorting: %w", err)
		}
		maps[i] = m
	}
	return o.sorter.sort(len(items), func(i int) map[string]any { return maps[i] }, func(i, j int) {
		items[i], items[j] = items[j], items[i]
		maps[i], maps[j] = maps[j], maps[i]
	})
}
