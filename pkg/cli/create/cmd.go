package create

import (
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// NewCmd returns `kubectl fleet create`.
func NewCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "create", Short: "Create a cluster on enrolled edge hosts"}
	cmd.AddCommand(newClusterCmd(flags, streams))
	return cmd
}

func newClusterCmd(flags *kube.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cluster NAME --kubernetes-version VERSION",
		Short: "Create a Cluster API cluster whose machines are edge hosts",
		Long: "Writes the Cluster, EdgeCluster, control plane (KubeadmControlPlane, or plain Machines with\n" +
			"--control-plane=machines), EdgeMachineTemplates, MachineDeployment, KubeadmConfigTemplate and\n" +
			"MachineHealthChecks, with the kubelet's provider-id wired to what fleet's agent reports. Server-side\n" +
			"apply: re-running is harmless; the API server checks every object (server-side dry run) before any is\n" +
			"written.\n" +
			"The host selectors take kubectl's -l syntax; given more than once, all must match. The cluster's failure\n" +
			"domains are the zones of the hosts its control plane may use.\n\n" +
			"--kubeadm-config takes a partial KubeadmConfigSpec (bootstrap.cluster.x-k8s.io/v1beta2 field names, YAML or\n" +
			"JSON, unknown fields refused) that every machine's bootstrap config starts from: the control plane gets all\n" +
			"of it, workers all but initConfiguration, clusterConfiguration and joinConfiguration.controlPlane. create\n" +
			"adds the node name and provider-id to both nodeRegistrations, keeping the file's other settings there (a\n" +
			"file that sets either differently is refused). Unless the file sets them, it gives the API server\n" +
			"--shutdown-watch-termination-grace-period=" + clustertemplate.ShutdownWatchGraceValue + " and, on a control plane of one machine,\n" +
			"--request-timeout=" + clustertemplate.RequestTimeoutOneHostValue + ": a one-host site's API is then down for less time while its control\n" +
			"plane restarts (docs/UPGRADES.md). The file's lists are taken as they are. The flags below add to the\n" +
			"file's lists (--ignore-preflight-errors, --skip-init-phases) or replace its value\n" +
			"(--image-pull-policy). docs/templates holds examples; docs/PROVISIONING.md says which settings a host needs.\n\n" +
			"Health checks: unless --health-check=false, a MachineHealthCheck for the workers and one for a\n" +
			"KubeadmControlPlane replace a Machine whose Node has not joined within --node-startup-timeout (20m), whose\n" +
			"Node has been NotReady or unreachable for --unhealthy-timeout (5m), or whose host has not been ready for\n" +
			"--host-unready-timeout (30m: its agent disconnected, the host lost, the bootstrap failed). A replaced worker\n" +
			"goes to another Available host; its old host returns to the pool only after its agent has reset it. A\n" +
			"KubeadmControlPlane of one machine is never remediated (Cluster API refuses; `kubectl fleet describe\n" +
			"cluster` says so). The checks stop while the hub cannot reach the cluster, e.g. a site offline.\n\n" +
			"--class makes a Cluster of a ClusterClass instead (Cluster API's managed topology): create writes only the\n" +
			"Cluster, with the version, the replicas (workers in a pool md-0) and the class's variables; the class builds\n" +
			"every other object, health checks included. Cluster API's webhook checks the variables against the class's\n" +
			"schemas in a server-side dry run before the Cluster is written. --class " + clustertemplate.ClassName + " is fleet's class\n" +
			"(docs/CLUSTERCLASS.md lists its variables), installed into the namespace when missing; --dry-run=client\n" +
			"prints the Cluster alone. The management cluster needs Cluster API's ClusterTopology feature gate\n" +
			"(docs/INSTALL.md). scale, describe, delete and the host commands work on such clusters as on the others.",
		Example: `  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 \
    --control-plane-machines 1 --worker-machines 2 --host-selector site=store-17

  # Workers on either of two racks, never on an interruptible host
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --worker-machines 2 \
    --host-selector site=store-17 --worker-host-selector 'rack in (r1,r2),!fleet.edgefleet.io/interruptible'

  # Faster remediation on a site with spare hosts; no health checks on a lab cluster
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --worker-machines 2 \
    --host-selector site=store-17 --unhealthy-timeout 2m --host-unready-timeout 10m
  kubectl fleet create cluster lab --kubernetes-version v1.36.3 --health-check=false

  # A site of fleet's ClusterClass: hosts labelled site=store-17, one worker
  kubectl fleet create cluster store-17 --class edge --kubernetes-version v1.36.3 --worker-machines 1 \
    --variable site=store-17 --variable certificatesExpiryDays=30

  # The class's variables from a file (docs/templates/topology-cgroupv1-test-hosts.yaml), one on top
  kubectl fleet create cluster lab --class edge --kubernetes-version v1.36.3 \
    --variables docs/templates/topology-cgroupv1-test-hosts.yaml --variable controlPlaneSchedulable=true

  # See what would be written
  kubectl fleet create cluster store-17 --kubernetes-version v1.36.3 --dry-run=client -o yaml

  # Kubeadm settings from a file, and a preflight check to ignore on top
  kubectl fleet create cluster lab --kubernetes-version v1.36.3 --worker-machines 1 \
    --kubeadm-config docs/templates/kubeadm-cgroupv1-test-hosts.yaml --ignore-preflight-errors NumCPU`,
		Args: cobra.ExactArgs(1),
		RunE: command.RunE(o),
	}
	o.changed = func(flag string) bool { return cmd.Flags().Changed(flag) }
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
	f.StringVar(&o.KubeadmConfig, "kubeadm-config", "", `File holding a partial KubeadmConfigSpec every machine's bootstrap config starts from ("-": stdin).`)
	f.StringSliceVar(&o.IgnorePreflightErrors, "ignore-preflight-errors", nil, "kubeadm preflight checks to ignore on init and join, e.g. SystemVerification (added to the file's).")
	f.StringVar(&o.ImagePullPolicy, "image-pull-policy", "", "kubeadm's image pull policy on init and join: Always, IfNotPresent or Never (replaces the file's).")
	f.StringSliceVar(&o.SkipInitPhases, "skip-init-phases", nil, "kubeadm init phases to skip, e.g. addon/kube-proxy (added to the file's initConfiguration.skipPhases).")
	f.StringVar(&o.DryRun, "dry-run", "none", `"client" prints the objects without writing them.`)
	f.StringVarP(&o.Output, "output", "o", "", "With --dry-run=client: yaml or json.")
	f.BoolVar(&o.HealthCheck, "health-check", true, "Create MachineHealthChecks for the control plane and the workers (false: none).")
	f.DurationVar(&o.NodeStartupTimeout, "node-startup-timeout", clustertemplate.DefaultNodeStartupTimeout, "Replace a Machine whose Node has not joined this long after its creation (0: never).")
	f.DurationVar(&o.UnhealthyTimeout, "unhealthy-timeout", clustertemplate.DefaultUnhealthyTimeout, "Replace a Machine whose Node has been NotReady or unreachable this long (0: never).")
	f.DurationVar(&o.HostUnreadyTimeout, "host-unready-timeout", clustertemplate.DefaultHostUnreadyTimeout, "Replace a Machine whose host has not been ready this long: agent disconnected, host lost, bootstrap failed (0: never).")
	f.StringVar(&o.MaxUnhealthy, "max-unhealthy", clustertemplate.DefaultMaxUnhealthy, "Remediate only while at most this many of a health check's Machines are unhealthy: a count or a percentage.")
	f.StringVar(&o.Class, "class", "", "Make a Cluster of this ClusterClass (spec.topology): the class builds the objects. "+
		"\""+clustertemplate.ClassName+"\" is fleet's, installed into the namespace if missing.")
	f.StringArrayVar(&o.Variables, "variable", nil, "With --class: a class variable, NAME=VALUE with the value in YAML (site=store-17, 'ignorePreflightErrors=[NumCPU]').")
	f.StringVar(&o.VariablesFile, "variables", "", "With --class: a YAML file mapping variable names to values (--variable overrides it).")
	f.Int32Var(&o.CertificatesExpiryDays, "certificates-expiry-days", 0, "Renew the control plane's certificates once they expire within this many days (≥ 7): a KubeadmControlPlane replaces the machine (rollout.before; with --class, the certificatesExpiryDays variable); with --control-plane=machines each host's agent renews them in place. 0: never.")
	f.BoolVar(&o.Wait, "wait", false, "Wait until every machine is Running, showing progress.")
	f.DurationVar(&o.Timeout, "timeout", 30*time.Minute, "How long --wait waits.")
	return cmd
}
