package create

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// plainOnlyFlags are create's flags that build the objects a ClusterClass
// builds instead; with --class each is refused, saying what to use.
var plainOnlyFlags = map[string]string{
	"control-plane":               "the class makes a KubeadmControlPlane",
	"host-selector":               "choose hosts with --variable site=…, zone=… or controlPlaneHostSelector/workerHostSelector",
	"control-plane-host-selector": "use --variable controlPlaneHostSelector='{matchLabels: {…}}'",
	"worker-host-selector":        "use --variable workerHostSelector='{matchLabels: {…}}'",
	"control-plane-endpoint":      "the class sets the endpoint its agents resolve",
	"kubeadm-config":              "the class's variables carry kubeadm settings (files, preKubeadmCommands, …): see docs/CLUSTERCLASS.md",
	"ignore-preflight-errors":     "use --variable ignorePreflightErrors='[…]'",
	"image-pull-policy":           "use --variable imagePullPolicy=…",
	"skip-init-phases":            "the class has no variable for it",
	"health-check":                "the class has the health checks",
	"node-startup-timeout":        "the class has the health checks",
	"unhealthy-timeout":           "the class has the health checks",
	"host-unready-timeout":        "the class has the health checks",
	"max-unhealthy":               "the class has the health checks",
}

// variableName is what Cluster API allows as a variable's name.
var variableName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?$`)

// validateClass checks the flags of a topology cluster and parses its
// variables: --variables FILE first, each --variable over it.
func (o *Options) validateClass() []error {
	var errs []error
	for _, flag := range slices.Sorted(func(yield func(string) bool) {
		for f := range plainOnlyFlags {
			if !yield(f) {
				return
			}
		}
	}) {
		if o.changed != nil && o.changed(flag) {
			errs = append(errs, fmt.Errorf("--%s does not go with --class: %s", flag, plainOnlyFlags[flag]))
		}
	}
	o.variables = nil
	if o.VariablesFile != "" {
		vars, err := o.readVariablesFile()
		if err != nil {
			errs = append(errs, fmt.Errorf("--variables %s: %w", o.VariablesFile, err))
		}
		o.variables = vars
	}
	if o.CertificatesExpiryDays != 0 {
		o.setVariable("certificatesExpiryDays", fmt.Appendf(nil, "%d", o.CertificatesExpiryDays))
	}
	for _, kv := range o.Variables {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !variableName.MatchString(name) {
			errs = append(errs, fmt.Errorf("--variable %q: want NAME=VALUE, the value in YAML (site=store-17, 'ignorePreflightErrors=[NumCPU]')", kv))
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(value))
		if err != nil {
			errs = append(errs, fmt.Errorf("--variable %s: the value is not YAML: %w", name, err))
			continue
		}
		o.setVariable(name, j)
	}
	return errs
}

// readVariablesFile reads a YAML map of variable names to values.
func (o *Options) readVariablesFile() ([]clusterv1.ClusterVariable, error) {
	data, err := os.ReadFile(o.VariablesFile)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		return nil, fmt.Errorf("want a YAML map of variable names to values: %w", err)
	}
	var vars []clusterv1.ClusterVariable
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		if !variableName.MatchString(name) {
			return nil, fmt.Errorf("%q is not a variable name", name)
		}
		j, err := yaml.Marshal(m[name])
		if err == nil {
			j, err = yaml.YAMLToJSON(j)
		}
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", name, err)
		}
		vars = append(vars, clusterv1.ClusterVariable{Name: name, Value: apiextensionsv1.JSON{Raw: j}})
	}
	return vars, nil
}

// setVariable sets a variable, replacing one of the same name.
func (o *Options) setVariable(name string, value []byte) {
	v := clusterv1.ClusterVariable{Name: name, Value: apiextensionsv1.JSON{Raw: value}}
	if i := slices.IndexFunc(o.variables, func(v clusterv1.ClusterVariable) bool { return v.Name == name }); i >= 0 {
		o.variables[i] = v
		return
	}
	o.variables = append(o.variables, v)
}

// topologyCluster is the Cluster of a topology: the class does the rest.
func (o *Options) topologyCluster() *clusterv1.Cluster {
	s := o.spec
	c := &clusterv1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace},
		Spec: clusterv1.ClusterSpec{Topology: clusterv1.Topology{
			ClassRef:     clusterv1.ClusterClassRef{Name: o.Class},
			Version:      s.KubernetesVersion,
			ControlPlane: clusterv1.ControlPlaneTopology{Replicas: ptr.To(s.ControlPlaneMachines)},
			Variables:    o.variables,
		}},
	}
	if s.WorkerMachines > 0 {
		c.Spec.Topology.Workers.MachineDeployments = []clusterv1.MachineDeploymentTopology{
			{Class: o.workerClass, Name: clustertemplate.TopologyWorkers, Replicas: ptr.To(s.WorkerMachines)}}
	}
	if s.PodCIDR != "" {
		c.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{s.PodCIDR}
	}
	if s.ServiceCIDR != "" {
		c.Spec.ClusterNetwork.Services.CIDRBlocks = []string{s.ServiceCIDR}
	}
	return c
}

// runClass creates a topology cluster: the class first when it is fleet's
// and missing, then the Cluster, checked by a server-side dry run (Cluster
// API's webhook checks the variables against the class's schemas).
func (o *Options) runClass(ctx context.Context) error {
	c, ns := o.conn.Client, o.spec.Namespace
	class := &clusterv1.ClusterClass{}
	err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Class}, class)
	switch {
	case apierrors.IsNotFound(err) && o.Class == clustertemplate.ClassName:
		if class, err = o.installClass(ctx); err != nil {
			return err
		}
	case apierrors.IsNotFound(err):
		return fmt.Errorf("ClusterClass %s not found in namespace %s (fleet ships one, %s: --class %s installs it)", o.Class, ns,
			clustertemplate.ClassName, clustertemplate.ClassName)
	case err != nil:
		return o.conn.Explain(err)
	}
	if o.workerClass, err = workerClass(class, o.spec.WorkerMachines); err != nil {
		return err
	}
	cluster := o.topologyCluster()
	if err := apply(ctx, c, cluster, true); err != nil {
		return o.conn.Explain(fmt.Errorf("checking Cluster %s (nothing of it was written): %w", cluster.Name, err))
	}
	if err := apply(ctx, c, cluster, false); err != nil {
		return o.conn.Explain(fmt.Errorf("applying Cluster %s: %w", cluster.Name, err))
	}
	fmt.Fprintf(o.Out, "cluster/%s applied (ClusterClass %s)\n", cluster.Name, o.Class)
	if !o.Wait {
		return nil
	}
	check := progress.Machines(c, ns, o.spec.Name, int(o.spec.ControlPlaneMachines), int(o.spec.WorkerMachines))
	if err := progress.Until(ctx, o.Out, o.Timeout, "cluster "+o.spec.Name, check); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s: every machine Running\n", o.spec.Name)
	return nil
}

// workerClass is the class's worker class new workers use: "worker" (the
// shipped class's), or the class's only one.
func workerClass(class *clusterv1.ClusterClass, workers int32) (string, error) {
	var names []string
	for _, md := range class.Spec.Workers.MachineDeployments {
		names = append(names, md.Class)
	}
	switch {
	case workers == 0 || slices.Contains(names, clustertemplate.WorkerClass):
		return clustertemplate.WorkerClass, nil
	case len(names) == 1:
		return names[0], nil
	case len(names) == 0:
		return "", fmt.Errorf("ClusterClass %s has no worker class: create the cluster with --worker-machines 0", class.Name)
	}
	return "", fmt.Errorf("ClusterClass %s has worker classes %s and none named %s: write the Cluster's spec.topology yourself",
		class.Name, strings.Join(names, ", "), clustertemplate.WorkerClass)
}

// installClass installs fleet's ClusterClass into the namespace, every
// object checked before any is written, and waits until Cluster API has
// read its variables (its webhook checks a Cluster's against them).
func (o *Options) installClass(ctx context.Context) (*clusterv1.ClusterClass, error) {
	c, ns := o.conn.Client, o.spec.Namespace
	objs, err := clustertemplate.ClassObjects(ns)
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		if err := apply(ctx, c, u, true); err != nil {
			return nil, o.conn.Explain(fmt.Errorf("checking %s %s of ClusterClass %s (nothing was written): %w", u.GetKind(), u.GetName(), o.Class, err))
		}
	}
	for _, u := range objs {
		if err := apply(ctx, c, u, false); err != nil {
			return nil, o.conn.Explain(fmt.Errorf("installing %s %s of ClusterClass %s: %w", u.GetKind(), u.GetName(), o.Class, err))
		}
	}
	fmt.Fprintf(o.Out, "clusterclass/%s installed (fleet's, with its templates)\n", o.Class)
	class := &clusterv1.ClusterClass{}
	err = progress.Until(ctx, o.Out, time.Minute, "clusterclass "+o.Class, func(ctx context.Context) (string, bool, error) {
		if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Class}, class); err != nil {
			return "", false, err
		}
		cond := meta.FindStatusCondition(class.Status.Conditions, clusterv1.ClusterClassVariablesReadyCondition)
		if cond == nil || cond.ObservedGeneration != class.Generation {
			return "waiting for Cluster API to read its variables", false, nil
		}
		if cond.Status != metav1.ConditionTrue {
			return "", false, fmt.Errorf("ClusterClass %s: %s", o.Class, cond.Message)
		}
		return "clusterclass " + o.Class + ": variables read", true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w (is Cluster API's ClusterTopology feature gate on? docs/INSTALL.md)", err)
	}
	return class, nil
}
