package clustertemplate

import (
	"bytes"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Flavor is one clusterctl cluster template: the objects create makes for
// one shape of cluster, with clusterctl variables where the user chooses.
type Flavor struct {
	// Name is what `clusterctl generate cluster --flavor` takes; empty for
	// the default template.
	Name string
	// Description says what the flavor is for.
	Description string
	// Variables are the clusterctl variables the template uses.
	Variables []string
	spec      func(Spec) Spec
	// template, when set, is the flavor's template as it is, not one
	// rendered from a Spec.
	template []byte
}

// File is the release asset's name, as clusterctl looks it up.
func (f Flavor) File() string {
	if f.Name == "" {
		return "cluster-template.yaml"
	}
	return "cluster-template-" + f.Name + ".yaml"
}

// Flavors are fleet's cluster templates; each is the Spec create builds
// from the flags the Description names.
var Flavors = []Flavor{{
	Description: "A KubeadmControlPlane of CONTROL_PLANE_MACHINE_COUNT hosts and a MachineDeployment of WORKER_MACHINE_COUNT workers " +
		"(create cluster --control-plane-machines N --worker-machines M).",
	Variables: []string{"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT", "EDGE_HOST_SELECTOR", "POD_CIDR", "SERVICE_CIDR"},
	spec:      func(s Spec) Spec { return s },
}, {
	Name: "single-host",
	Description: "A one-host site: a KubeadmControlPlane of one host that also runs workloads (its control-plane taint left off), " +
		"no workers (create cluster --worker-machines 0 with a kubeadm config holding initConfiguration.nodeRegistration.taints: []).",
	Variables: []string{"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "EDGE_HOST_SELECTOR", "POD_CIDR", "SERVICE_CIDR"},
	spec: func(s Spec) Spec {
		s.ControlPlaneMachines, s.WorkerMachines = 1, 0
		s.Kubeadm.InitConfiguration.NodeRegistration.Taints = &[]corev1.Taint{}
		return s
	},
}, {
	Name: "machines",
	Description: "One control-plane host as a plain Machine, without KubeadmControlPlane, and a MachineDeployment of WORKER_MACHINE_COUNT workers " +
		"(create cluster --control-plane=machines --control-plane-machines 1 --worker-machines M).",
	Variables: []string{"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "WORKER_MACHINE_COUNT", "EDGE_HOST_SELECTOR", "POD_CIDR", "SERVICE_CIDR"},
	spec: func(s Spec) Spec {
		s.ControlPlane, s.ControlPlaneMachines = "machines", 1
		return s
	},
}, {
	Name: "topology",
	Description: "A site from fleet's ClusterClass " + ClassName + " (" + ClassFile + "): a KubeadmControlPlane of CONTROL_PLANE_MACHINE_COUNT hosts " +
		"and WORKER_MACHINE_COUNT workers at the hosts labelled site=EDGE_SITE " +
		"(create cluster --class " + ClassName + " --variable site=EDGE_SITE).",
	Variables: []string{"CLUSTER_NAME", "NAMESPACE", "KUBERNETES_VERSION", "CONTROL_PLANE_MACHINE_COUNT", "WORKER_MACHINE_COUNT", "EDGE_SITE", "POD_CIDR", "SERVICE_CIDR"},
	template:  topologyTemplate,
}}

//go:embed cluster-template-topology.yaml
var topologyTemplate []byte

// Defaults of the optional variables: create's own (--pod-cidr) and
// kubeadm's (its Service network), and every host.
const (
	DefaultPodCIDR     = "192.168.0.0/16"
	DefaultServiceCIDR = "10.96.0.0/12"
)

// The placeholders Template puts into the Spec, replaced in the YAML by
// clusterctl variables. Uppercase, so no object's own text holds them.
const (
	phName      = "CLUSTERNAME0"
	phNamespace = "NAMESPACE0"
	phVersion   = "KUBERNETESVERSION0"
	phPodCIDR   = "PODCIDR0"
	phSvcCIDR   = "SERVICECIDR0"
	phSelector  = "EDGEHOSTSELECTOR0"
	phCPCount   = 1234567
	phWorkers   = 7654321
)

var selectorBlock = regexp.MustCompile(`(?m)^(\s*)hostSelector:\n\s*matchLabels:\n\s*` + phSelector + `: x\n`)

// Template renders the flavor's clusterctl template from the objects
// Objects makes, so `kubectl fleet create cluster` and `clusterctl generate
// cluster` write the same thing. The control-plane endpoint is create's
// default, a name the cluster's agents resolve.
func (f Flavor) Template() ([]byte, error) {
	if f.template != nil {
		return f.template, nil
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{phSelector: "x"}}
	s := f.spec(Spec{Name: phName, Namespace: phNamespace, KubernetesVersion: phVersion, ControlPlane: "kubeadm",
		ControlPlaneMachines: phCPCount, WorkerMachines: phWorkers, ControlPlaneSelector: sel, WorkerSelector: sel,
		Endpoint: infrav1.APIEndpoint{Host: fmt.Sprintf("%s.%s.%s", phName, phNamespace, infrav1.EndpointDomain), Port: 6443},
		PodCIDR:  phPodCIDR, ServiceCIDR: phSvcCIDR})
	// The health checks `create cluster` writes by default.
	hc := DefaultHealthCheck()
	s.HealthCheck = &hc
	var buf bytes.Buffer
	for _, obj := range Objects(s) {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(u, "status")
		b, err := yaml.Marshal(u)
		if err != nil {
			return nil, err
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	out := selectorBlock.ReplaceAllString(buf.String(), "${1}hostSelector: $${EDGE_HOST_SELECTOR:=null}\n")
	out = strings.NewReplacer(
		phName, "${CLUSTER_NAME}",
		phNamespace, "${NAMESPACE}",
		phVersion, "${KUBERNETES_VERSION}",
		phPodCIDR, "${POD_CIDR:="+DefaultPodCIDR+"}",
		phSvcCIDR, "${SERVICE_CIDR:="+DefaultServiceCIDR+"}",
		fmt.Sprintf("replicas: %d", phCPCount), "replicas: ${CONTROL_PLANE_MACHINE_COUNT}",
		fmt.Sprintf("replicas: %d", phWorkers), "replicas: ${WORKER_MACHINE_COUNT}",
	).Replace(out)
	for _, ph := range []string{phName, phNamespace, phVersion, phPodCIDR, phSvcCIDR, phSelector, fmt.Sprint(phCPCount), fmt.Sprint(phWorkers)} {
		if strings.Contains(out, ph) {
			return nil, fmt.Errorf("cluster template %s: placeholder %s left where no variable replaced it", f.File(), ph)
		}
	}
	return []byte(out), nil
}
