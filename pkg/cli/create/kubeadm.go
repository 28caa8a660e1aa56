package create

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/clustertemplate"
)

// readKubeadmConfig reads --kubeadm-config: a file, or stdin for "-".
func (o *Options) readKubeadmConfig() ([]byte, error) {
	if o.KubeadmConfig != "-" {
		return os.ReadFile(o.KubeadmConfig)
	}
	if o.In == nil {
		return nil, errors.New("no standard input to read")
	}
	return io.ReadAll(o.In)
}

// phaseName is a kubeadm phase: lowercase words, nested with slashes
// (upload-certs, addon/kube-proxy).
var phaseName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*(/[a-z0-9]+(-[a-z0-9]+)*)*$`)

// completeKubeadm reads --kubeadm-config and lays the flags over it: the
// lists the flags give are added to the file's, --image-pull-policy
// replaces the file's. Every error is found here, before any object is made.
func (o *Options) completeKubeadm() error {
	var spec bootstrapv1.KubeadmConfigSpec
	if o.KubeadmConfig != "" {
		data, err := o.readKubeadmConfig()
		if err == nil {
			spec, err = clustertemplate.ParseKubeadmConfig(data)
		}
		if err != nil {
			return fmt.Errorf("--kubeadm-config %s: %w", o.KubeadmConfig, err)
		}
	}
	var errs []error
	init, join := &spec.InitConfiguration.NodeRegistration, &spec.JoinConfiguration.NodeRegistration
	for _, e := range o.IgnorePreflightErrors {
		if strings.TrimSpace(e) == "" || strings.ContainsAny(e, " \t") {
			errs = append(errs, fmt.Errorf("--ignore-preflight-errors %q: want check names such as SystemVerification, comma-separated", e))
			continue
		}
		init.IgnorePreflightErrors = addOnce(init.IgnorePreflightErrors, e)
		join.IgnorePreflightErrors = addOnce(join.IgnorePreflightErrors, e)
	}
	for _, p := range o.SkipInitPhases {
		if !phaseName.MatchString(p) {
			errs = append(errs, fmt.Errorf("--skip-init-phases %q: want kubeadm init phase names such as addon/kube-proxy, comma-separated", p))
			continue
		}
		spec.InitConfiguration.SkipPhases = addOnce(spec.InitConfiguration.SkipPhases, p)
	}
	switch corev1.PullPolicy(o.ImagePullPolicy) {
	case "":
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		init.ImagePullPolicy = corev1.PullPolicy(o.ImagePullPolicy)
		join.ImagePullPolicy = corev1.PullPolicy(o.ImagePullPolicy)
	default:
		errs = append(errs, fmt.Errorf("--image-pull-policy %q: want Always, IfNotPresent or Never", o.ImagePullPolicy))
	}
	for _, nr := range []struct {
		path string
		nr   *bootstrapv1.NodeRegistrationOptions
	}{{"initConfiguration.nodeRegistration", init}, {"joinConfiguration.nodeRegistration", join}} {
		errs = append(errs, checkNodeRegistration(nr.path, nr.nr)...)
	}
	// fleet-agent runs cloud-config; an Ignition bootstrap would fail on
	// every host.
	if f := spec.Format; f != "" && f != bootstrapv1.CloudConfig {
		errs = append(errs, fmt.Errorf("format %q: fleet-agent runs %q bootstraps only", f, bootstrapv1.CloudConfig))
	}
	o.spec.Kubeadm = spec
	return validate.Join(errs...)
}

// checkNodeRegistration refuses settings kubeadm or CABPK would refuse later
// and a file that would undo create's node wiring.
func checkNodeRegistration(path string, nr *bootstrapv1.NodeRegistrationOptions) []error {
	var errs []error
	switch nr.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("%s.imagePullPolicy %q: want Always, IfNotPresent or Never", path, nr.ImagePullPolicy))
	}
	if nr.Name != "" && nr.Name != clustertemplate.NodeNameTemplate {
		errs = append(errs, fmt.Errorf("%s.name %q: create names each node after its host (%q), which fleet reports; leave it out",
			path, nr.Name, clustertemplate.NodeNameTemplate))
	}
	for _, a := range nr.KubeletExtraArgs {
		if a.Name == "hostname-override" {
			errs = append(errs, fmt.Errorf("%s.kubeletExtraArgs hostname-override: it renames the node, which create names after its host (%q); leave it out",
				path, clustertemplate.NodeNameTemplate))
		}
		if a.Name == clustertemplate.ProviderIDArg && ptr.Deref(a.Value, "") != clustertemplate.ProviderIDTemplate {
			errs = append(errs, fmt.Errorf("%s.kubeletExtraArgs %s=%q: create sets it to %q, the providerID fleet gives the host, so Cluster API finds the Node; leave it out",
				path, clustertemplate.ProviderIDArg, ptr.Deref(a.Value, ""), clustertemplate.ProviderIDTemplate))
		}
	}
	return errs
}

// addOnce appends v unless the list has it already (kubeadm compares
// preflight check names case-insensitively; phase names are lowercase).
func addOnce(list []string, v string) []string {
	if slices.ContainsFunc(list, func(s string) bool { return strings.EqualFold(s, v) }) {
		return list
	}
	return append(list, v)
}
