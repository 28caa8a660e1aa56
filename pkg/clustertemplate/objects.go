package clustertemplate

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Spec is what a user asks for.
type Spec struct {
	Name, Namespace      string
	KubernetesVersion    string
	ControlPlane         string // "kubeadm" (KubeadmControlPlane) or "machines"
	ControlPlaneMachines int32
	WorkerMachines       int32
	ControlPlaneSelector *metav1.LabelSelector // nil matches every host
	WorkerSelector       *metav1.LabelSelector
	Endpoint             infrav1.APIEndpoint
	PodCIDR, ServiceCIDR string
	// Kubeadm is the user's kubeadm settings (--kubeadm-config and the
	// flags over it); every machine's bootstrap config starts from it.
	Kubeadm bootstrapv1.KubeadmConfigSpec
	// HealthCheck, when set, adds MachineHealthChecks for the control
	// plane and the workers.
	HealthCheck *HealthCheck
	// CertificatesExpiryDays, when set, has a KubeadmControlPlane replace
	// a machine whose certificates expire within that many days; a control
	// plane of plain Machines has its hosts' agents renew them in place.
	CertificatesExpiryDays int32
}

// kubeadmConfig is the user's kubeadm settings with create's node wiring
// in both nodeRegistrations, for a control plane: KCP takes init and join.
func (s Spec) kubeadmConfig() bootstrapv1.KubeadmConfigSpec {
	c := *s.Kubeadm.DeepCopy()
	wireNode(&c.InitConfiguration.NodeRegistration)
	wireNode(&c.JoinConfiguration.NodeRegistration)
	defaultAPIServerArgs(&c.ClusterConfiguration.APIServer, s.ControlPlaneMachines == 1)
	return c
}

// workerConfig is what a worker's kubeadm join uses: no init or cluster
// configuration, and no joinConfiguration.controlPlane, which CABPK refuses
// on a worker.
func (s Spec) workerConfig() bootstrapv1.KubeadmConfigSpec {
	c := s.kubeadmConfig()
	c.InitConfiguration, c.ClusterConfiguration = bootstrapv1.InitConfiguration{}, bootstrapv1.ClusterConfiguration{}
	c.JoinConfiguration.ControlPlane = nil
	return c
}

// Object is one of the objects of a cluster: what controller-runtime calls
// client.Object, declared here so the CLI, which builds on this package,
// does not link controller-runtime's client.
type Object interface {
	metav1.Object
	runtime.Object
}

// Objects returns every object of the cluster, in creation order.
func Objects(s Spec) []Object {
	objs := []Object{s.cluster(), &infrav1.EdgeCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "EdgeCluster"},
		ObjectMeta: s.meta(s.Name),
		// The failure domains are the zones of the control-plane hosts:
		// only KCP places machines by failure domain (the MachineDeployment
		// names none), and a zone without a control-plane host would hold
		// a Machine waiting for ever.
		Spec: infrav1.EdgeClusterSpec{ControlPlaneEndpoint: s.Endpoint, HostSelector: s.ControlPlaneSelector.DeepCopy()},
	}}
	objs = append(objs, s.controlPlane()...)
	objs = append(objs, s.workers()...)
	return append(objs, s.healthChecks()...)
}

func (s Spec) controlPlaneName() string { return s.Name + "-control-plane" }
func (s Spec) workersName() string      { return s.Name + "-md-0" }

// meta is the metadata of the cluster's objects: the cluster-name label.
func (s Spec) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: map[string]string{clusterv1.ClusterNameLabel: s.Name}}
}

func (s Spec) cluster() *clusterv1.Cluster {
	cluster := &clusterv1.Cluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: s.meta(s.Name),
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: s.Name},
		},
	}
	if s.PodCIDR != "" {
		cluster.Spec.ClusterNetwork.Pods.CIDRBlocks = []string{s.PodCIDR}
	}
	if s.ServiceCIDR != "" {
		cluster.Spec.ClusterNetwork.Services.CIDRBlocks = []string{s.ServiceCIDR}
	}
	if s.ControlPlane == "kubeadm" {
		cluster.Spec.ControlPlaneRef = clusterv1.ContractVersionedObjectReference{
			APIGroup: controlplanev1.GroupVersion.Group, Kind: "KubeadmControlPlane", Name: s.controlPlaneName()}
	}
	return cluster
}

// controlPlane is the control-plane EdgeMachineTemplate and either a
// KubeadmControlPlane or, per machine, a KubeadmConfig, EdgeMachine and
// Machine.
func (s Spec) controlPlane() []Object {
	infraGroup := infrav1.GroupVersion.Group
	cpName := s.controlPlaneName()
	objs := []Object{machineTemplate(s.meta(cpName), s.ControlPlaneSelector)}
	switch s.ControlPlane {
	case "kubeadm":
		objs = append(objs, &controlplanev1.KubeadmControlPlane{
			TypeMeta:   metav1.TypeMeta{APIVersion: controlplanev1.GroupVersion.String(), Kind: "KubeadmControlPlane"},
			ObjectMeta: s.meta(cpName),
			Spec: controlplanev1.KubeadmControlPlaneSpec{
				Replicas: ptr.To(s.ControlPlaneMachines),
				Version:  s.KubernetesVersion,
				MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: "EdgeMachineTemplate", Name: cpName}}},
				KubeadmConfigSpec: s.kubeadmConfig(),
				Rollout:           controlplanev1.KubeadmControlPlaneRolloutSpec{Before: controlplanev1.KubeadmControlPlaneRolloutBeforeSpec{CertificatesExpiryDays: s.CertificatesExpiryDays}},
			},
		})
	case "machines":
		cpLabels := map[string]string{clusterv1.ClusterNameLabel: s.Name, clusterv1.MachineControlPlaneLabel: ""}
		for i := int32(0); i < s.ControlPlaneMachines; i++ {
			name := fmt.Sprintf("%s-%d", cpName, i)
			// The first machine inits; the others join as control plane.
			cfg := s.kubeadmConfig()
			if i == 0 {
				cfg.JoinConfiguration = bootstrapv1.JoinConfiguration{}
			} else {
				cfg.InitConfiguration = bootstrapv1.InitConfiguration{}
				if cfg.JoinConfiguration.ControlPlane == nil {
					cfg.JoinConfiguration.ControlPlane = &bootstrapv1.JoinControlPlane{}
				}
			}
			objs = append(objs,
				&bootstrapv1.KubeadmConfig{TypeMeta: metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfig"},
					ObjectMeta: s.meta(name), Spec: cfg},
				&infrav1.EdgeMachine{TypeMeta: metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "EdgeMachine"},
					ObjectMeta: s.meta(name), Spec: infrav1.EdgeMachineSpec{HostSelector: s.ControlPlaneSelector.DeepCopy(),
						CertificatesRenewBeforeDays: s.CertificatesExpiryDays}},
				&clusterv1.Machine{
					TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine"},
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: cpLabels},
					Spec: clusterv1.MachineSpec{ClusterName: s.Name, Version: s.KubernetesVersion,
						Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
							APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfig", Name: name}},
						InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infraGroup, Kind: "EdgeMachine", Name: name},
						Deletion:          clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
					},
				})
		}
	}
	return objs
}

// workers is the workers' EdgeMachineTemplate, KubeadmConfigTemplate and
// MachineDeployment, rolled out with maxSurge 0: a replacement needs no
// spare host.
func (s Spec) workers() []Object {
	mdName := s.workersName()
	mdSelector := map[string]string{clusterv1.ClusterNameLabel: s.Name, "cluster.x-k8s.io/deployment-name": mdName}
	return []Object{
		machineTemplate(s.meta(mdName), s.WorkerSelector),
		&bootstrapv1.KubeadmConfigTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: bootstrapv1.GroupVersion.String(), Kind: "KubeadmConfigTemplate"},
			ObjectMeta: s.meta(mdName),
			Spec:       bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{Spec: s.workerConfig()}},
		},
		&clusterv1.MachineDeployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment"},
			ObjectMeta: s.meta(mdName),
			Spec: clusterv1.MachineDeploymentSpec{
				ClusterName: s.Name,
				Replicas:    ptr.To(s.WorkerMachines),
				Selector:    metav1.LabelSelector{MatchLabels: mdSelector},
				Rollout: clusterv1.MachineDeploymentRolloutSpec{Strategy: clusterv1.MachineDeploymentRolloutStrategy{
					Type: clusterv1.RollingUpdateMachineDeploymentStrategyType,
					RollingUpdate: clusterv1.MachineDeploymentRolloutStrategyRollingUpdate{
						MaxSurge: ptr.To(intstr.FromInt32(0)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}}},
				Template: clusterv1.MachineTemplateSpec{
					ObjectMeta: clusterv1.ObjectMeta{Labels: mdSelector},
					Spec: clusterv1.MachineSpec{ClusterName: s.Name, Version: s.KubernetesVersion,
						Bootstrap: clusterv1.Bootstrap{ConfigRef: clusterv1.ContractVersionedObjectReference{
							APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: mdName}},
						InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: mdName},
						Deletion:          clusterv1.MachineDeletionSpec{NodeDeletionTimeoutSeconds: ptr.To[int32](10)},
					},
				},
			},
		},
	}
}

func machineTemplate(meta metav1.ObjectMeta, sel *metav1.LabelSelector) *infrav1.EdgeMachineTemplate {
	return &infrav1.EdgeMachineTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: infrav1.GroupVersion.String(), Kind: "EdgeMachineTemplate"},
		ObjectMeta: meta,
		Spec:       infrav1.EdgeMachineTemplateSpec{Template: infrav1.EdgeMachineTemplateResource{Spec: infrav1.EdgeMachineSpec{HostSelector: sel.DeepCopy()}}},
	}
}
