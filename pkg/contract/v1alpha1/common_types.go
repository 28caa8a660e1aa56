package v1alpha1

// The shapes below mirror Cluster API v1beta2 (sigs.k8s.io/cluster-api/api/core/v1beta2)
// field for field and JSON name for JSON name, because core reads them from our
// objects as unstructured data. They are copied rather than imported to keep
// this package free of Cluster API dependencies.

// APIEndpoint is the address and port of a cluster's API server.
// +kubebuilder:validation:MinProperties=1
type APIEndpoint struct {
	// host is the hostname or IP on which the API server is serving.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Host string `json:"host,omitempty"`

	// port is the port on which the API server is serving.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// IsValid reports whether both host and port are set, the test Cluster API
// applies before it copies an endpoint onto the Cluster.
func (e APIEndpoint) IsValid() bool {
	return e.Host != "" && e.Port != 0
}

// MachineAddressType is the kind of a machine address.
// +kubebuilder:validation:Enum=Hostname;ExternalIP;InternalIP;ExternalDNS;InternalDNS
type MachineAddressType string

// Address types understood by Cluster API.
const (
	MachineHostName    MachineAddressType = "Hostname"
	MachineExternalIP  MachineAddressType = "ExternalIP"
	MachineInternalIP  MachineAddressType = "InternalIP"
	MachineExternalDNS MachineAddressType = "ExternalDNS"
	MachineInternalDNS MachineAddressType = "InternalDNS"
)

// MachineAddress is one address of a machine.
type MachineAddress struct {
	// type is the kind of address.
	// +required
	Type MachineAddressType `json:"type"`

	// address is the address itself.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Address string `json:"address"`
}

// MachineAddresses is a list of machine addresses.
// +kubebuilder:validation:MaxItems=128
type MachineAddresses []MachineAddress

// FailureDomain is a zone that machines can be spread over.
type FailureDomain struct {
	// name is the failure domain, the value of the hosts' topology.kubernetes.io/zone label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// controlPlane says whether control-plane machines may be placed here.
	// +optional
	ControlPlane *bool `json:"controlPlane,omitempty"`

	// attributes are free-form facts about the failure domain.
	// +optional
	Attributes map[string]string `json:"attributes,omitempty"`
}

// ObjectMeta is the metadata a template stamps onto the objects made from it.
type ObjectMeta struct {
	// labels to add to the created object.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations to add to the created object.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}
