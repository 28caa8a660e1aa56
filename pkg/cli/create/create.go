package create

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// Options is `kubectl fleet create cluster`.
type Options struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	KubernetesVersion    string
	ControlPlane         string
	ControlPlaneMachines int32
	WorkerMachines       int32
	HostSelector         []string
	ControlPlaneSelector []string
	WorkerSelector       []string
	Endpoint             string
	PodCIDR, ServiceCIDR string
	DryRun               string
	Output               string
	Wait                 bool
	Timeout              time.Duration

	spec Spec
	conn *kube.Connection
}

// NewCmd returns `kubectl fleet create`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "create", Short: "Create a cluster on enrolled edge hosts"}
	cmd.AddCommand(newClusterCmd(flags, streams))
	return cmd
}

func newClusterCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cluster NAME --kubernetes-version VERSION",
		Short: "Create a Cluster API cluster whose machines are edge hosts",
		Long: "Writes the Cluster, EdgeCluster, control plane (KubeadmControlPlane, or plain Machines with\n" +
			"--control-plane=machines), EdgeMachineTemplates, MachineDeployment and KubeadmConfigTemplate, with the\n" +
			"kubelet's provider-id wired to what fleet's agent reports. Server-side apply: re-running is harmless.",
		Example: `  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 \
    --control-plane-machines 1 --worker-machines 2 --host-selector site=store-17

  # See what would be written
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --dry-run=client -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes version, e.g. v1.36.3 (required).")
	f.StringVar(&o.ControlPlane, "control-plane", "kubeadm", "Control plane: kubeadm (KubeadmControlPlane) or machines (plain Machines).")
	f.Int32Var(&o.ControlPlaneMachines, "control-plane-machines", 1, "Control-plane machines (odd, for etcd quorum).")
	f.Int32Var(&o.WorkerMachines, "worker-machines", 0, "Worker machines.")
	f.StringSliceVar(&o.HostSelector, "host-selector", nil, "Labels every host of the cluster must have (k=v,…).")
	f.StringSliceVar(&o.ControlPlaneSelector, "control-plane-host-selector", nil, "Extra labels for control-plane hosts.")
	f.StringSliceVar(&o.WorkerSelector, "worker-host-selector", nil, "Extra labels for worker hosts.")
	f.StringVar(&o.Endpoint, "control-plane-endpoint", "", "host:port of the API server (default <name>.<namespace>.fleet.internal:6443, a name agents resolve).")
	f.StringVar(&o.PodCIDR, "pod-cidr", "192.168.0.0/16", "Pod network.")
	f.StringVar(&o.ServiceCIDR, "service-cidr", "", "Service network (default: kubeadm's).")
	f.StringVar(&o.DryRun, "dry-run", "none", `"client" prints the objects without writing them.`)
	f.StringVarP(&o.Output, "output", "o", "", "With --dry-run=client: yaml or json.")
	f.BoolVar(&o.Wait, "wait", false, "Wait until every machine is Running, showing progress.")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	return cmd
}

func parseSelector(flag string, items []string, into map[string]string) error {
	for _, it := range items {
		k, v, ok := strings.Cut(it, "=")
		if !ok || k == "" {
			return fmt.Errorf("--%s %q: want key=value", flag, it)
		}
		into[k] = v
	}
	return nil
}

// Complete builds the Spec and connects.
func (o *Options) Complete(args []string) error {
	o.spec = Spec{Name: args[0], KubernetesVersion: o.KubernetesVersion, ControlPlane: o.ControlPlane,
		ControlPlaneMachines: o.ControlPlaneMachines, WorkerMachines: o.WorkerMachines,
		ControlPlaneSelector: map[string]string{}, WorkerSelector: map[string]string{},
		PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR}
	common := map[string]string{}
	if err := parseSelector("host-selector", o.HostSelector, common); err != nil {
		return err
	}
	for k, v := range common {
		o.spec.ControlPlaneSelector[k], o.spec.WorkerSelector[k] = v, v
	}
	if err := parseSelector("control-plane-host-selector", o.ControlPlaneSelector, o.spec.ControlPlaneSelector); err != nil {
		return err
	}
	if err := parseSelector("worker-host-selector", o.WorkerSelector, o.spec.WorkerSelector); err != nil {
		return err
	}
	var err error
	if o.DryRun == "client" {
		ns, _, nerr := o.flags.ToRawKubeConfigLoader().Namespace()
		if nerr != nil {
			ns = "default"
		}
		o.spec.Namespace = ns
	} else {
		if o.conn, err = kube.Connect(o.flags); err != nil {
			return err
		}
		o.spec.Namespace = o.conn.Namespace
	}
	endpoint := o.Endpoint
	if endpoint == "" {
		endpoint = fmt.Sprintf("%s.%s.%s:6443", o.spec.Name, o.spec.Namespace, infrav1.EndpointDomain)
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return fmt.Errorf("--control-plane-endpoint %q: want host:port", endpoint)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("--control-plane-endpoint %q: bad port", endpoint)
	}
	o.spec.Endpoint = infrav1.APIEndpoint{Host: host, Port: int32(p)}
	return nil
}

// Validate refuses what cannot work, with the reason.
func (o *Options) Validate() error {
	var errs []error
	if !strings.HasPrefix(o.KubernetesVersion, "v") || strings.Count(o.KubernetesVersion, ".") != 2 {
		errs = append(errs, fmt.Errorf("--kubernetes-version %q: want vMAJOR.MINOR.PATCH, e.g. v1.36.3", o.KubernetesVersion))
	}
	if o.ControlPlane != "kubeadm" && o.ControlPlane != "machines" {
		errs = append(errs, fmt.Errorf("--control-plane %q: want kubeadm or machines", o.ControlPlane))
	}
	if o.ControlPlaneMachines < 1 || o.ControlPlaneMachines%2 == 0 {
		errs = append(errs, fmt.Errorf("--control-plane-machines %d: want an odd number ≥ 1, so etcd keeps quorum when one member is lost", o.ControlPlaneMachines))
	}
	if o.WorkerMachines < 0 {
		errs = append(errs, errors.New("--worker-machines must not be negative"))
	}
	if o.DryRun != "none" && o.DryRun != "client" {
		errs = append(errs, fmt.Errorf("--dry-run %q: want none or client", o.DryRun))
	}
	if o.Output != "" && o.DryRun != "client" {
		errs = append(errs, errors.New("-o is for --dry-run=client"))
	}
	return errors.Join(errs...)
}

// Run applies (or prints) the objects and optionally waits.
func (o *Options) Run(ctx context.Context) error {
	objs := Objects(o.spec)
	if o.DryRun == "client" {
		var p printers.ResourcePrinter = &printers.YAMLPrinter{}
		if o.Output == "json" {
			p = &printers.JSONPrinter{}
		}
		for _, obj := range objs {
			if err := p.PrintObj(obj, o.Out); err != nil {
				return err
			}
		}
		return nil
	}
	o.warnAboutHosts(ctx)
	for _, obj := range objs {
		if err := o.conn.Client.Patch(ctx, obj, client.Apply, client.FieldOwner("kubectl-fleet"), client.ForceOwnership); err != nil {
			return o.conn.Explain(fmt.Errorf("applying %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err))
		}
		fmt.Fprintf(o.Out, "%s/%s applied\n", strings.ToLower(obj.GetObjectKind().GroupVersionKind().Kind), obj.GetName())
	}
	if !o.Wait {
		return nil
	}
	return WaitForMachines(ctx, o.conn.Client, o.Out, o.spec.Namespace, o.spec.Name, int(o.spec.ControlPlaneMachines+o.spec.WorkerMachines), o.Timeout)
}

// warnAboutHosts says, before anything is written, when fewer hosts match
// than machines are asked for — with what the hosts do look like.
func (o *Options) warnAboutHosts(ctx context.Context) {
	hosts := &infrav1.EdgeHostList{}
	if err := o.conn.Client.List(ctx, hosts, client.InNamespace(o.spec.Namespace)); err != nil {
		return
	}
	check := func(role string, sel map[string]string, want int32) {
		s := labels.SelectorFromSet(sel)
		free := 0
		for i := range hosts.Items {
			if s.Matches(labels.Set(hosts.Items[i].Labels)) && inventory.IsClaimable(&hosts.Items[i]) {
				free++
			}
		}
		if int32(free) >= want {
			return
		}
		seen := map[string]int{}
		for _, h := range hosts.Items {
			seen[kube.LabelString(h.Labels)]++
		}
		var kinds []string
		for l, n := range seen {
			kinds = append(kinds, fmt.Sprintf("%d× {%s}", n, l))
		}
		sort.Strings(kinds)
		fmt.Fprintf(o.ErrOut, "warning: %d %s machine(s) wanted but only %d Available host(s) in namespace %s match {%s}; the rest will wait for hosts. Hosts there: %s\n",
			want, role, free, o.spec.Namespace, kube.LabelString(sel), strings.Join(kinds, ", "))
	}
	check("control-plane", o.spec.ControlPlaneSelector, o.spec.ControlPlaneMachines)
	check("worker", o.spec.WorkerSelector, o.spec.WorkerMachines)
}

// WaitForMachines waits until want Machines of the cluster are Running,
// printing a line whenever the count by phase changes.
func WaitForMachines(ctx context.Context, c client.Client, out interface{ Write([]byte) (int, error) }, ns, cluster string, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, client.InNamespace(ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return err
		}
		phases := map[string]int{}
		running := 0
		for _, m := range machines.Items {
			p := m.Status.Phase
			if p == "" {
				p = "Pending"
			}
			phases[p]++
			if p == string(clusterv1.MachinePhaseRunning) {
				running++
			}
		}
		var parts []string
		for p, n := range phases {
			parts = append(parts, fmt.Sprintf("%d %s", n, p))
		}
		sort.Strings(parts)
		line := fmt.Sprintf("machines: %d/%d Running (%s)", running, want, strings.Join(parts, ", "))
		if line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if running >= want && len(machines.Items) == want {
			fmt.Fprintf(out, "cluster %s is ready\n", cluster)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for cluster %s: %s", cluster, line)
		case <-time.After(2 * time.Second):
		}
	}
}
