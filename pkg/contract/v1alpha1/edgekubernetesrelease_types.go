package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubernetesArtifact is one architecture's archive of a Kubernetes version,
// in the layout hosts stage versions in: kubeadm, kubelet and images/*.tar
// at its top.
type KubernetesArtifact struct {
	// arch is the CPU architecture, in GOARCH form (amd64, arm64), as hosts
	// report it in status.facts.arch.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
	Arch string `json:"arch"`

	// url the archive is downloaded from: a tar file, gzipped or not. http
	// or https; or oci://REGISTRY/REPOSITORY[:TAG], an OCI artifact whose
	// layer is the archive (oras push), fetched anonymously as the blob
	// of digest sha256:<sha256>. The sha256 guards what arrives either
	// way. The hosts download it, or the hub with delivery Hub.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https?|oci)://`
	URL string `json:"url"`

	// sha256 of the archive, in hex. An archive that does not match is
	// thrown away and not fetched again until the url or sha256 changes.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256 string `json:"sha256"`
}

// KubernetesDelivery is how a release's archive reaches its hosts.
// +kubebuilder:validation:Enum=Direct;Hub
type KubernetesDelivery string

const (
	// KubernetesDeliveryDirect means each host downloads the archive from its
	// url.
	KubernetesDeliveryDirect KubernetesDelivery = "Direct"
	// KubernetesDeliveryHub means the hub downloads the archive and carries it
	// to each host through the host's own session, for sites whose only
	// way out is to the hub. Hosts whose agent cannot take it that way
	// are not ordered to stage the version.
	KubernetesDeliveryHub KubernetesDelivery = "Hub"
)

// EdgeKubernetesReleaseSpec says where hosts get a Kubernetes version from.
type EdgeKubernetesReleaseSpec struct {
	// version is the Kubernetes version the artifacts hold.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+].*)?$`
	Version string `json:"version"`

	// artifacts, one per architecture.
	// +required
	// +listType=map
	// +listMapKey=arch
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Artifacts []KubernetesArtifact `json:"artifacts"`

	// delivery is how the archives reach the hosts: Direct (each host
	// downloads its url) or Hub (the hub downloads it and carries it
	// through each host's session: resumable after a cut, one transfer per
	// host, within the hub replica's transfer budget).
	// +optional
	// +kubebuilder:default=Direct
	Delivery KubernetesDelivery `json:"delivery,omitempty"`

	// hostSelector narrows the EdgeHosts, in the release's namespace, that
	// stage the version. Empty means every host in the namespace.
	// +optional
	HostSelector *metav1.LabelSelector `json:"hostSelector,omitempty"`
}

// EdgeKubernetesReleaseStatus counts the selected hosts by how far they are.
type EdgeKubernetesReleaseStatus struct {
	// conditions: Staged (True once every selected host of an architecture
	// the release has can run or has staged the version).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// hosts selected, of an architecture the release has an artifact for.
	// +optional
	Hosts int32 `json:"hosts"`
	// staged: hosts that have the version staged or run it.
	// +optional
	Staged int32 `json:"staged"`
	// failed: hosts whose last attempt failed (see their
	// status.staging).
	// +optional
	Failed int32 `json:"failed"`
	// observedGeneration is the spec generation these counts are for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=edgekubernetesreleases,scope=Namespaced,categories=fleet,shortName=ekr
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".spec.version"
// +kubebuilder:printcolumn:name="Hosts",type="integer",JSONPath=".status.hosts"
// +kubebuilder:printcolumn:name="Staged",type="integer",JSONPath=".status.staged"
// +kubebuilder:printcolumn:name="Failed",type="integer",JSONPath=".status.failed"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeKubernetesRelease makes a Kubernetes version available to the hosts
// of its namespace: their agents download it, check it and stage it, so
// that an in-place upgrade (or a Machine of that version) can use it.
type EdgeKubernetesRelease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec EdgeKubernetesReleaseSpec `json:"spec"`
	// +optional
	Status EdgeKubernetesReleaseStatus `json:"status,omitempty"`
}

// GetConditions returns the release's conditions.
func (r *EdgeKubernetesRelease) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions replaces the release's conditions.
func (r *EdgeKubernetesRelease) SetConditions(conds []metav1.Condition) { r.Status.Conditions = conds }

// Artifact is the release's artifact for arch, or nil.
func (r *EdgeKubernetesRelease) Artifact(arch string) *KubernetesArtifact {
	for i := range r.Spec.Artifacts {
		if r.Spec.Artifacts[i].Arch == arch {
			return &r.Spec.Artifacts[i]
		}
	}
	return nil
}

// +kubebuilder:object:root=true

// EdgeKubernetesReleaseList is a list of EdgeKubernetesReleases.
type EdgeKubernetesReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeKubernetesRelease `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &EdgeKubernetesRelease{}, &EdgeKubernetesReleaseList{})
}

// ThroughHub reports whether the hub carries the release's archives.
func (r *EdgeKubernetesRelease) ThroughHub() bool {
	return r.Spec.Delivery == KubernetesDeliveryHub
}
