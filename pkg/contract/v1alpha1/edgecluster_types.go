package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EdgeClusterSpec is the desired state of an EdgeCluster.
type EdgeClusterSpec struct {
	// controlPlaneEndpoint is where the cluster's API server is reached. When
	// it is empty the hub waits for someone else (a control-plane provider,
	// or the user) to set it on the Cluster.
	// +optional
	ControlPlaneEndpoint APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// hostSelector narrows the EdgeHosts whose zones this cluster offers as
	// failure domains. Empty means every host in the namespace.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
}

// EdgeClusterInitializationStatus is the Cluster API initialization contract.
// +kubebuilder:validation:MinProperties=1
type EdgeClusterInitializationStatus struct {
	// provisioned is true once the cluster's infrastructure is ready.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// EdgeClusterStatus is the observed state of an EdgeCluster.
type EdgeClusterStatus struct {
	// conditions: Ready, Paused, ControlPlaneEndpointReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// initialization follows the Cluster API InfraCluster contract.
	// +optional
	Initialization EdgeClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// failureDomains are the zones of the hosts this cluster may use.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	FailureDomains []FailureDomain `json:"failureDomains,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=edgeclusters,scope=Namespaced,categories=cluster-api;fleet,shortName=ec
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Cluster",type="string",JSONPath=".metadata.labels['cluster\\.x-k8s\\.io/cluster-name']"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Endpoint",type="string",JSONPath=".spec.controlPlaneEndpoint.host"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeCluster is the Cluster API infrastructure of a cluster whose machines
// are edge hosts.
type EdgeCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec EdgeClusterSpec `json:"spec,omitempty"`
	// +optional
	Status EdgeClusterStatus `json:"status,omitempty"`
}

// GetConditions returns the cluster's conditions.
func (c *EdgeCluster) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the cluster's conditions.
func (c *EdgeCluster) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// +kubebuilder:object:root=true

// EdgeClusterList is a list of EdgeClusters.
type EdgeClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeCluster `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &EdgeCluster{}, &EdgeClusterList{})
}

// EdgeClusterTemplateResource is what an EdgeClusterTemplate stamps out.
type EdgeClusterTemplateResource struct {
	// metadata to put on the EdgeClusters made from the template.
	// +optional
	ObjectMeta ObjectMeta `json:"metadata,omitempty,omitzero"`
	// spec of the EdgeClusters made from the template.
	// +optional
	Spec EdgeClusterSpec `json:"spec,omitempty,omitzero"`
}

// EdgeClusterTemplateSpec is the desired state of an EdgeClusterTemplate.
type EdgeClusterTemplateSpec struct {
	// template is immutable, as Cluster API expects: a ClusterClass rolls a
	// change out by pointing at a new template.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.template is immutable; create a new EdgeClusterTemplate and point the ClusterClass at it"
	Template EdgeClusterTemplateResource `json:"template"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=edgeclustertemplates,scope=Namespaced,categories=cluster-api;fleet,shortName=ect
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeClusterTemplate is the InfraClusterTemplate a ClusterClass clones
// each topology Cluster's EdgeCluster from.
type EdgeClusterTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec EdgeClusterTemplateSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// EdgeClusterTemplateList is a list of EdgeClusterTemplates.
type EdgeClusterTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeClusterTemplate `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &EdgeClusterTemplate{}, &EdgeClusterTemplateList{})
}
