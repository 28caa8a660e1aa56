package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EdgeMachinePhase is a coarse summary of an EdgeMachine's lifecycle.
type EdgeMachinePhase string

// Machine phases.
const (
	// MachinePending: waiting for its Machine, Cluster or bootstrap data.
	MachinePending EdgeMachinePhase = "Pending"
	// MachineWaitingForHost: no Available host matches.
	MachineWaitingForHost EdgeMachinePhase = "WaitingForHost"
	// MachineProvisioning: a host is claimed and its agent is at work.
	MachineProvisioning EdgeMachinePhase = "Provisioning"
	// MachineProvisioned: the host runs the bootstrap data to completion.
	MachineProvisioned EdgeMachinePhase = "Provisioned"
	// MachineFailed: the agent reported a failure; see HostProvisioned.
	MachineFailed EdgeMachinePhase = "Failed"
	// MachineDeleting: the machine is being deleted and its host released.
	MachineDeleting EdgeMachinePhase = "Deleting"
)

// EdgeMachineSpec is the desired state of an EdgeMachine.
type EdgeMachineSpec struct {
	// providerID must equal the providerID of the Node on this machine. The
	// hub sets it from what the agent on the claimed host reports.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// hostSelector picks the EdgeHosts, by label, this machine may claim.
	// Empty means any Available host in the namespace.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`

	// certificatesRenewBeforeDays, on a control-plane machine, has the
	// host's agent renew the control plane's certificates in place (kubeadm
	// certs renew, then the static pods restarted) once they expire within
	// this many days: checked when the order arrives and daily after,
	// also while the site is cut off from the hub, at most once a day. For
	// a control plane that is never replaced, as a one-host site's. 0 or
	// unset: never.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1095
	CertificatesRenewBeforeDays int32 `json:"certificatesRenewBeforeDays,omitempty"`
}

// EdgeMachineInitializationStatus is the Cluster API initialization contract.
// +kubebuilder:validation:MinProperties=1
type EdgeMachineInitializationStatus struct {
	// provisioned is true once the host runs the machine's bootstrap data.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// EdgeMachineStatus is the observed state of an EdgeMachine.
type EdgeMachineStatus struct {
	// conditions: Ready, Paused, BootstrapDataReady, HostClaimed, HostProvisioned.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization follows the Cluster API InfraMachine contract.
	// +optional
	Initialization EdgeMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// phase is a coarse summary for people; conditions carry the detail.
	// +optional
	Phase EdgeMachinePhase `json:"phase,omitempty"`

	// hostRef names the EdgeHost this machine holds, in its namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	HostRef string `json:"hostRef,omitempty"`

	// addresses of the host, as its agent reports them.
	// +optional
	Addresses MachineAddresses `json:"addresses,omitempty"`

	// failureDomain is the zone of the claimed host.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	FailureDomain string `json:"failureDomain,omitempty"`

	// interruptible is true when the claimed host is labelled interruptible.
	// +optional
	Interruptible bool `json:"interruptible,omitempty"`

	// nodeName is the Node the kubelet on the host registered.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// certificatesExpiryDate is the earliest expiry of the host's kubeadm
	// and kubelet certificates.
	// +optional
	CertificatesExpiryDate *metav1.Time `json:"certificatesExpiryDate,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=edgemachines,scope=Namespaced,categories=cluster-api;fleet,shortName=em
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Host",type="string",JSONPath=".status.hostRef"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Machine",type="string",JSONPath=".metadata.ownerReferences[?(@.kind=='Machine')].name",priority=1
// +kubebuilder:printcolumn:name="Internal-IP",type="string",JSONPath=".status.addresses[?(@.type=='InternalIP')].address",priority=1
// +kubebuilder:printcolumn:name="Cert-Expiry",type="string",JSONPath=".status.certificatesExpiryDate",priority=1

// EdgeMachine is the Cluster API infrastructure of one Machine: the EdgeHost
// it holds and what that host's agent reports.
type EdgeMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec EdgeMachineSpec `json:"spec,omitempty"`
	// +optional
	Status EdgeMachineStatus `json:"status,omitempty"`
}

// GetConditions returns the machine's conditions.
func (m *EdgeMachine) GetConditions() []metav1.Condition { return m.Status.Conditions }

// SetConditions replaces the machine's conditions.
func (m *EdgeMachine) SetConditions(c []metav1.Condition) { m.Status.Conditions = c }

// +kubebuilder:object:root=true

// EdgeMachineList is a list of EdgeMachines.
type EdgeMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeMachine `json:"items"`
}

// EdgeMachineTemplateResource is what a template stamps out.
type EdgeMachineTemplateResource struct {
	// metadata to put on the machines made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the machines made from the template.
	// +required
	Spec EdgeMachineSpec `json:"spec"`
}

// EdgeMachineTemplateSpec is the desired state of an EdgeMachineTemplate.
type EdgeMachineTemplateSpec struct {
	// template is immutable, as Cluster API expects: roll out a change by
	// pointing the MachineDeployment or control plane at a new template.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.template is immutable; create a new EdgeMachineTemplate and point the MachineDeployment or control plane at it"
	Template EdgeMachineTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=edgemachinetemplates,scope=Namespaced,categories=cluster-api;fleet,shortName=emt
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeMachineTemplate is the template MachineDeployments and control planes
// clone EdgeMachines from.
type EdgeMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec EdgeMachineTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// EdgeMachineTemplateList is a list of EdgeMachineTemplates.
type EdgeMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeMachineTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &EdgeMachine{}, &EdgeMachineList{}, &EdgeMachineTemplate{}, &EdgeMachineTemplateList{})
}
