package create

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

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
			"kubelet's provider-id wired to what fleet's agent reports. Server-side apply: re-running is harmless.\n" +
			"The host selectors take kubectl's -l syntax; given more than once, all must match. The cluster's failure\n" +
			"domains are the zones of the hosts its control plane may use.",
		Example: `  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 \
    --control-plane-machines 1 --worker-machines 2 --host-selector site=store-17

  # Workers on either of two racks, never on an interruptible host
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --worker-machines 2 \
    --host-selector site=store-17 --worker-host-selector 'rack in (r1,r2),!fleet.edgefleet.io/interruptible'

  # See what would be written
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --dry-run=client -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: command.RunE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.KubernetesVersion, "kubernetes-version", "", "Kubernetes version, e.g. v1.36.3 (required).")
	f.StringVar(&o.ControlPlane, "control-plane", "kubeadm", "Control plane: kubeadm (KubeadmControlPlane) or machines (plain Machines).")
	f.Int32Var(&o.ControlPlaneMachines, "control-plane-machines", 1, "Control-plane machines (odd, for etcd quorum).")
	f.Int32Var(&o.WorkerMachines, "worker-machines", 0, "Worker machines.")
	f.StringArrayVar(&o.HostSelector, "host-selector", nil, "Label selector every host of the cluster must match (k=v, k!=v, 'k in (a,b)', !k, …).")
	f.StringArrayVar(&o.ControlPlaneSelector, "control-plane-host-selector", nil, "Label selector control-plane hosts must match too.")
	f.StringArrayVar(&o.WorkerSelector, "worker-host-selector", nil, "Label selector worker hosts must match too.")
	f.StringVar(&o.Endpoint, "control-plane-endpoint", "", "host:port of the API server (default <name>.<namespace>.fleet.internal:6443, a name agents resolve).")
	f.StringVar(&o.PodCIDR, "pod-cidr", "192.168.0.0/16", "Pod network.")
	f.StringVar(&o.ServiceCIDR, "service-cidr", "", "Service network (default: kubeadm's).")
	f.StringVar(&o.DryRun, "dry-run", "none", `"client" prints the objects without writing them.`)
	f.StringVarP(&o.Output, "output", "o", "", "With --dry-run=client: yaml or json.")
	f.BoolVar(&o.Wait, "wait", false, "Wait until every machine is Running, showing progress.")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	return cmd
}
