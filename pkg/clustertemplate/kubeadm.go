package clustertemplate

import (
	"encoding/json"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/yaml"
)

// The node wiring create adds to every nodeRegistration: the node name is
// the host's name, and the kubelet's providerID the one fleet gives the
// host, so Cluster API finds the Node. The agent expands both on the host.
const (
	NodeNameTemplate   = "{{ ds.meta_data.local_hostname }}"
	ProviderIDTemplate = "{{ ds.meta_data.provider_id }}"
	ProviderIDArg      = "provider-id"
)

// ParseKubeadmConfig reads a partial KubeadmConfigSpec (YAML or JSON, the
// field names of bootstrap.cluster.x-k8s.io/v1beta2) strictly: an unknown or
// repeated field is an error naming it, so a typo never goes silently unused.
func ParseKubeadmConfig(data []byte) (bootstrapv1.KubeadmConfigSpec, error) {
	var spec bootstrapv1.KubeadmConfigSpec
	doc, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return spec, err
	}
	// The typed decoding gives the clearer message for a wrong type; the
	// unstructured one names an unknown field by its full path.
	if err := json.Unmarshal(doc, &spec); err != nil {
		return spec, err
	}
	var fields map[string]any
	if err := utiljson.Unmarshal(doc, &fields); err != nil {
		return spec, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(fields, &bootstrapv1.KubeadmConfigSpec{}, true); err != nil {
		return spec, err
	}
	return spec, nil
}

// wireNode adds the node name and provider-id to nr, keeping every
// other setting it has.
func wireNode(nr *bootstrapv1.NodeRegistrationOptions) {
	nr.Name = NodeNameTemplate
	arg := bootstrapv1.Arg{Name: ProviderIDArg, Value: ptr.To(ProviderIDTemplate)}
	if i := slices.IndexFunc(nr.KubeletExtraArgs, func(a bootstrapv1.Arg) bool { return a.Name == ProviderIDArg }); i >= 0 {
		nr.KubeletExtraArgs[i] = arg
		return
	}
	nr.KubeletExtraArgs = append(nr.KubeletExtraArgs, arg)
}

// The API server flags create adds unless the user's settings give them,
// each shortening a one-host site's outage when its control plane restarts
// (docs/UPGRADES.md): a stopping API server ends its watches at once, and
// on one machine a request waiting for a restarting etcd (the kubelet's
// mirror-pod DELETE, which gates the new etcd) gives up after 20 s, not 34.
const (
	ShutdownWatchGraceArg      = "shutdown-watch-termination-grace-period"
	ShutdownWatchGraceValue    = "5s"
	RequestTimeoutArg          = "request-timeout"
	RequestTimeoutOneHostValue = "20s"
)

// defaultAPIServerArgs adds create's API server flags the user's settings
// do not already give; oneHost is a control plane of one machine, whose
// API server has no other to stand in for it.
func defaultAPIServerArgs(a *bootstrapv1.APIServer, oneHost bool) {
	add := func(name, value string) {
		if !slices.ContainsFunc(a.ExtraArgs, func(x bootstrapv1.Arg) bool { return x.Name == name }) {
			a.ExtraArgs = append(a.ExtraArgs, bootstrapv1.Arg{Name: name, Value: ptr.To(value)})
		}
	}
	add(ShutdownWatchGraceArg, ShutdownWatchGraceValue)
	if oneHost {
		add(RequestTimeoutArg, RequestTimeoutOneHostValue)
	}
}
