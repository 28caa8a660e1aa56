package create

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is `kubectl fleet create cluster`.
type Options struct {
	flags *kube.ConfigFlags
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
	// KubeadmConfig is a file (or "-" for stdin) holding a partial
	// KubeadmConfigSpec every machine's bootstrap config starts from.
	KubeadmConfig         string
	IgnorePreflightErrors []string
	ImagePullPolicy       string
	SkipInitPhases        []string
	DryRun                string
	Output                string
	Wait                  bool
	Timeout               time.Duration
	// HealthCheck turns the MachineHealthChecks on; the rest tune them.
	HealthCheck        bool
	NodeStartupTimeout time.Duration
	UnhealthyTimeout   time.Duration
	HostUnreadyTimeout time.Duration
	MaxUnhealthy       string
	// Class, when set, makes a topology Cluster of that ClusterClass with
	// the variables of VariablesFile and Variables (NAME=VALUE, in YAML).
	Class         string
	Variables     []string
	VariablesFile string
	// CertificatesExpiryDays is KCP's rollout.before.certificatesExpiryDays
	// (the class's certificatesExpiryDays variable with --class), or the
	// control-plane EdgeMachines' certificatesRenewBeforeDays with
	// --control-plane=machines; 0: unset.
	CertificatesExpiryDays int32

	spec        clustertemplate.Spec
	conn        *kube.Connection
	changed     func(flag string) bool
	variables   []clusterv1.ClusterVariable
	workerClass string
}

// Complete takes the name and finds the namespace; it builds a client
// unless the objects are only printed.
func (o *Options) Complete(args []string) error {
	o.spec = clustertemplate.Spec{Name: args[0], KubernetesVersion: o.KubernetesVersion, ControlPlane: o.ControlPlane,
		ControlPlaneMachines: o.ControlPlaneMachines, WorkerMachines: o.WorkerMachines,
		PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR}
	if o.DryRun == "client" {
		ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
		if err != nil {
			ns = "default"
		}
		o.spec.Namespace = ns
	} else {
		var err error
		if o.conn, err = kube.Connect(o.flags); err != nil {
			return err
		}
		o.spec.Namespace = o.conn.Namespace
	}
	if o.Endpoint == "" {
		o.Endpoint = fmt.Sprintf("%s.%s.%s:6443", o.spec.Name, o.spec.Namespace, infrav1.EndpointDomain)
	}
	return nil
}

// Validate refuses what cannot work, with the reason, before anything is
// sent; it parses the selectors and the endpoint into the Spec.
func (o *Options) Validate() error {
	if err := validate.NewClusterName(o.spec.Name); err != nil {
		return err
	}
	errs := o.validateCounts()
	if d := o.CertificatesExpiryDays; d != 0 && d < 7 {
		errs = append(errs, fmt.Errorf("--certificates-expiry-days %d: want 7 or more (KubeadmControlPlane's minimum), or 0 for never", d))
	}
	if o.CertificatesExpiryDays != 0 && o.Class == "" && o.ControlPlane == "machines" && o.ControlPlaneMachines > 1 {
		errs = append(errs, fmt.Errorf("--certificates-expiry-days with --control-plane=machines renews in place, restarting the control plane: "+
			"with %d control-plane machines they would all restart at once and etcd lose its quorum; use --control-plane=kubeadm, "+
			"whose KubeadmControlPlane replaces them one at a time", o.ControlPlaneMachines))
	}
	o.spec.CertificatesExpiryDays = o.CertificatesExpiryDays
	if o.Class != "" {
		if err := validate.NewClusterName(o.Class); err != nil {
			errs = append(errs, fmt.Errorf("--class: %w", err))
		}
		errs = append(errs, o.validateClass()...)
	} else {
		errs = append(errs, o.validatePlain()...)
	}
	for flag, cidr := range map[string]string{"--pod-cidr": o.PodCIDR, "--service-cidr": o.ServiceCIDR} {
		if _, _, err := net.ParseCIDR(cidr); cidr != "" && err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want an address range such as 10.96.0.0/12", flag, cidr))
		}
	}
	if o.DryRun != "none" && o.DryRun != "client" {
		errs = append(errs, fmt.Errorf("--dry-run %q: want none or client", o.DryRun))
	}
	if o.Output != "" && o.DryRun != "client" {
		errs = append(errs, errors.New("-o is for --dry-run=client"))
	}
	if o.Output != "" && o.Output != "yaml" && o.Output != "json" {
		errs = append(errs, fmt.Errorf("-o %q: want yaml or json", o.Output))
	}
	if o.Wait && o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: want a positive duration", o.Timeout))
	}
	return validate.Join(errs...)
}

// validatePlain checks the flags that build a cluster's objects without a
// ClusterClass into the Spec.
func (o *Options) validatePlain() []error {
	var errs []error
	if len(o.Variables) > 0 || o.VariablesFile != "" {
		errs = append(errs, errors.New("--variable and --variables are for a cluster of a ClusterClass (--class)"))
	}
	if err := o.completeSelectors(); err != nil {
		errs = append(errs, err)
	}
	if err := o.completeEndpoint(); err != nil {
		errs = append(errs, err)
	}
	if err := o.completeKubeadm(); err != nil {
		errs = append(errs, err)
	}
	return append(errs, o.completeHealthCheck()...)
}

func (o *Options) validateCounts() []error {
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
	return errs
}

// completeSelectors parses the host selectors: each role's hosts match the
// common selector and the role's own.
func (o *Options) completeSelectors() error {
	var err error
	if o.spec.ControlPlaneSelector, err = validate.LabelSelector("--host-selector/--control-plane-host-selector",
		append(append([]string{}, o.HostSelector...), o.ControlPlaneSelector...)...); err != nil {
		return err
	}
	o.spec.WorkerSelector, err = validate.LabelSelector("--host-selector/--worker-host-selector",
		append(append([]string{}, o.HostSelector...), o.WorkerSelector...)...)
	return err
}

func (o *Options) completeEndpoint() error {
	host, port, err := net.SplitHostPort(o.Endpoint)
	if err != nil || host == "" {
		return fmt.Errorf("--control-plane-endpoint %q: want host:port", o.Endpoint)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("--control-plane-endpoint %q: bad port", o.Endpoint)
	}
	o.spec.Endpoint = infrav1.APIEndpoint{Host: host, Port: int32(p)}
	return nil
}

// Run applies (or prints) the objects and optionally waits.
func (o *Options) Run(ctx context.Context) error {
	objs := clustertemplate.Objects(o.spec)
	if o.Class != "" {
		if o.DryRun != "client" {
			return o.runClass(ctx)
		}
		o.workerClass = clustertemplate.WorkerClass
		objs = []clustertemplate.Object{o.topologyCluster()}
	}
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
	// The API server checks every object first (server-side dry run), so a
	// value its schemas refuse, from --kubeadm-config say, leaves nothing
	// half made.
	for _, obj := range objs {
		if err := apply(ctx, o.conn.Client, obj, true); err != nil {
			return o.conn.Explain(fmt.Errorf("checking %s %s (nothing was written): %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err))
		}
	}
	for _, obj := range objs {
		if err := apply(ctx, o.conn.Client, obj, false); err != nil {
			return o.conn.Explain(fmt.Errorf("applying %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err))
		}
		fmt.Fprintf(o.Out, "%s/%s applied\n", strings.ToLower(obj.GetObjectKind().GroupVersionKind().Kind), obj.GetName())
	}
	if !o.Wait {
		return nil
	}
	check := progress.Machines(o.conn.Client, o.spec.Namespace, o.spec.Name, int(o.spec.ControlPlaneMachines), int(o.spec.WorkerMachines))
	if err := progress.Until(ctx, o.Out, o.Timeout, "cluster "+o.spec.Name, check); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s: every machine Running\n", o.spec.Name)
	return nil
}

// apply applies obj with server-side apply as kubectl-fleet, taking over
// the fields it sets; with dryRun the API server only checks it.
func apply(ctx context.Context, c *kube.Client, obj kube.Object, dryRun bool) error {
	return c.Apply(ctx, obj, kube.ApplyOptions{FieldManager: "kubectl-fleet", Force: true, DryRun: dryRun})
}

// completeHealthCheck checks the health-check flags into the Spec.
func (o *Options) completeHealthCheck() []error {
	if !o.HealthCheck {
		return nil
	}
	hc := clustertemplate.HealthCheck{NodeStartupTimeout: o.NodeStartupTimeout, UnhealthyTimeout: o.UnhealthyTimeout, HostUnreadyTimeout: o.HostUnreadyTimeout}
	var errs []error
	for flag, d := range map[string]time.Duration{"--node-startup-timeout": o.NodeStartupTimeout,
		"--unhealthy-timeout": o.UnhealthyTimeout, "--host-unready-timeout": o.HostUnreadyTimeout} {
		if err := validateTimeout(flag, d); err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	if hc.MaxUnhealthy, err = ParseMaxUnhealthy(o.MaxUnhealthy); err != nil {
		errs = append(errs, err)
	}
	o.spec.HealthCheck = &hc
	return errs
}
