package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// EdgeHostPhase is a coarse summary of where a host is in its lifecycle.
// +kubebuilder:validation:Enum=Available;Claimed;Provisioning;Provisioned;Deprovisioning;NeedsAttention
type EdgeHostPhase string

// Host phases, computed by the hub from spec and the agent's report.
const (
	// HostAvailable: clean, unclaimed, ready to be claimed.
	HostAvailable EdgeHostPhase = "Available"
	// HostClaimed: held by an EdgeMachine; the agent has not started on it.
	HostClaimed EdgeHostPhase = "Claimed"
	// HostProvisioning: the agent is running the machine's bootstrap data.
	HostProvisioning EdgeHostPhase = "Provisioning"
	// HostProvisioned: the agent finished the bootstrap data.
	HostProvisioned EdgeHostPhase = "Provisioned"
	// HostDeprovisioning: released, waiting for the agent to reset the host.
	HostDeprovisioning EdgeHostPhase = "Deprovisioning"
	// HostNeedsAttention: a bootstrap or a reset failed; an operator must look.
	HostNeedsAttention EdgeHostPhase = "NeedsAttention"
)

// ProvisioningState is what the agent says about the work on its host.
// +kubebuilder:validation:Enum=Provisioning;Provisioned;Failed;Resetting;ResetFailed
type ProvisioningState string

// Provisioning states reported by an agent.
const (
	ProvisioningRunning     ProvisioningState = "Provisioning"
	ProvisioningSucceeded   ProvisioningState = "Provisioned"
	ProvisioningFailed      ProvisioningState = "Failed"
	ProvisioningResetting   ProvisioningState = "Resetting"
	ProvisioningResetFailed ProvisioningState = "ResetFailed"
)

// EdgeHostSpec is what the hub wants of a host. Only the hub writes it; the
// agent receives it as its desired state.
type EdgeHostSpec struct {
	// claimRef names the EdgeMachine, in the host's namespace, that holds
	// this host. Set and cleared by the hub with optimistic concurrency, so
	// a host is never held by two machines.
	// +optional
	ClaimRef *HostClaimReference `json:"claimRef,omitempty"`

	// resetRetries counts the operator's requests to order a failed reset
	// again (`kubectl fleet host retry`, through RetryResetAnnotation).
	// Each change makes a new generation, which the agent takes as a new
	// order to reset the host.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ResetRetries int64 `json:"resetRetries,omitempty"`
}

// HostClaimReference identifies the EdgeMachine that holds a host.
type HostClaimReference struct {
	// name of the EdgeMachine.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// uid of the EdgeMachine, so a new machine with the same name is a new claim.
	// +required
	UID types.UID `json:"uid"`

	// bootstrapDataSecretName is the Secret, in the host's namespace, whose
	// `value` the agent runs.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BootstrapDataSecretName string `json:"bootstrapDataSecretName,omitempty"`

	// kubernetesVersion is the version the claiming Machine runs (its
	// spec.version). Before the bootstrap, the agent installs it when it is
	// staged on the host; once the host is provisioned, a version other
	// than the one it runs is an order to upgrade the host in place; empty
	// orders nothing. The hub sets it only to a version the host reports
	// it can run.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+].*)?$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// certificatesRenewBeforeDays is the claiming EdgeMachine's: on a
	// control plane, the agent renews the certificates in place once they
	// expire within this many days. 0: never.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1095
	CertificatesRenewBeforeDays int32 `json:"certificatesRenewBeforeDays,omitempty"`
}

// HostFacts are what the agent reports about its machine.
type HostFacts struct {
	// hostname of the machine.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname,omitempty"`
	// machineID is /etc/machine-id.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	MachineID string `json:"machineID,omitempty"`
	// os is the operating system's pretty name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	OS string `json:"os,omitempty"`
	// arch is the CPU architecture in GOARCH form (amd64, arm64).
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Arch string `json:"arch,omitempty"`
	// cpus is the number of logical CPUs.
	// +optional
	CPUs int32 `json:"cpus,omitempty"`
	// memoryBytes is the machine's physical memory.
	// +optional
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// agentVersion is the version of fleet-agent on the machine.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	AgentVersion string `json:"agentVersion,omitempty"`
	// kubernetesVersions are the Kubernetes versions staged on the machine
	// for an in-place upgrade (binaries and images under
	// /opt/fleet/kubernetes/<version>), oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	KubernetesVersions []string `json:"kubernetesVersions,omitempty"`
}

// HostProvisioningStatus is the agent's account of the workload on its host.
type HostProvisioningStatus struct {
	// claimUID is the uid of the EdgeMachine whose bootstrap data this is.
	// +required
	ClaimUID types.UID `json:"claimUID"`
	// state of the work.
	// +required
	State ProvisioningState `json:"state"`
	// step is the step the agent is at or failed at, e.g. "runcmd 3/7".
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Step string `json:"step,omitempty"`
	// message explains a failure.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// EdgeHostStatus is what the agent reports and what the hub concludes.
type EdgeHostStatus struct {
	// conditions: AgentConnected, Ready, Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// phase is the hub's summary of the host's lifecycle.
	// +optional
	Phase EdgeHostPhase `json:"phase,omitempty"`

	// facts about the machine, from the agent.
	// +optional
	Facts HostFacts `json:"facts,omitempty,omitzero"`

	// addresses of the machine, from the agent.
	// +optional
	Addresses MachineAddresses `json:"addresses,omitempty"`

	// lastSeenTime is when the hub last heard from the agent, by the hub's
	// clock. Coarse on purpose: it is not written on every heartbeat.
	// +optional
	LastSeenTime *metav1.Time `json:"lastSeenTime,omitempty"`

	// hubReplica is the hub replica that holds the agent's session; empty
	// while the agent is disconnected. Edge-reach tunnels to the host's
	// cluster go through that replica.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	HubReplica string `json:"hubReplica,omitempty"`

	// hubReplicaProxy is the address (host:port) at which other hub
	// replicas reach hubReplica's edge-reach proxy, to forward a CONNECT for
	// the host's cluster there; empty when that replica does not take
	// forwarded CONNECTs.
	// +optional
	// +kubebuilder:validation:MaxLength=261
	HubReplicaProxy string `json:"hubReplicaProxy,omitempty"`

	// agentObservedGeneration is the spec generation the agent has acted on.
	// +optional
	AgentObservedGeneration int64 `json:"agentObservedGeneration,omitempty"`

	// provisioning is the workload on the host, as the agent sees it. Absent
	// when the host is clean.
	// +optional
	Provisioning *HostProvisioningStatus `json:"provisioning,omitempty"`

	// providerID is the ID the agent gave the kubelet (edge://...).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ProviderID string `json:"providerID,omitempty"`

	// nodeName is the name the kubelet registered the Node under.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// certificatesExpiryDate is the earliest expiry of the kubeadm and
	// kubelet certificates on the host.
	// +optional
	CertificatesExpiryDate *metav1.Time `json:"certificatesExpiryDate,omitempty"`

	// kubernetesVersion is the version of the kubelet the host runs, once
	// provisioned. Agents too old to upgrade in place leave it empty.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// upgrade is the last in-place Kubernetes upgrade the agent ran.
	// +optional
	Upgrade *HostUpgradeStatus `json:"upgrade,omitempty"`

	// certificatesRenewal is the last in-place renewal of the control
	// plane's certificates the agent ran.
	// +optional
	CertificatesRenewal *HostCertificatesRenewalStatus `json:"certificatesRenewal,omitempty"`

	// agentRelease is what the agent knows of its own releases: the one
	// committed, the floor, how the last trial of a new one ended and how
	// getting the ordered one goes. Present, if empty, from every agent
	// that runs the releases an EdgeAgentRollout orders; absent from
	// agents that cannot.
	// +optional
	AgentRelease *AgentReleaseStatus `json:"agentRelease,omitempty"`

	// staging is the agent's account of the Kubernetes versions it was
	// told to fetch (EdgeKubernetesReleases selecting the host).
	// +optional
	// +listType=map
	// +listMapKey=version
	// +kubebuilder:validation:MaxItems=8
	Staging []HostStagingStatus `json:"staging,omitempty"`

	// link is the health of the site's network as the agent measured it
	// over its last window. The hub stores it coarsely (when the
	// LinkDegraded verdict changes, otherwise with lastSeenTime), so it
	// costs no write per sample.
	// +optional
	Link *LinkHealth `json:"link,omitempty"`
}

// UpgradeState is where an in-place Kubernetes upgrade is.
// +kubebuilder:validation:Enum=Upgrading;Succeeded;Failed;RolledBack
type UpgradeState string

// Upgrade states.
const (
	// UpgradeRunning: the agent is carrying the upgrade out.
	UpgradeRunning UpgradeState = "Upgrading"
	// UpgradeSucceeded: the host runs the new version and its Node is Ready.
	UpgradeSucceeded UpgradeState = "Succeeded"
	// UpgradeFailed: the upgrade could not start or failed before the host
	// was changed; it runs the old version.
	UpgradeFailed UpgradeState = "Failed"
	// UpgradeRolledBack: the upgrade failed after the host was changed and
	// the agent put the old version back.
	UpgradeRolledBack UpgradeState = "RolledBack"
)

// HostUpgradeStatus is an in-place Kubernetes upgrade, as the agent reports it.
type HostUpgradeStatus struct {
	// from is the version the host ran before.
	// +kubebuilder:validation:MaxLength=64
	From string `json:"from"`
	// to is the version ordered.
	// +kubebuilder:validation:MaxLength=64
	To string `json:"to"`
	// state is where the upgrade is.
	State UpgradeState `json:"state"`
	// step is the step running, or the one that failed.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Step string `json:"step,omitempty"`
	// message says what failed (the command and the end of its output) and
	// what the agent did about it.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// RenewalState is where an in-place certificate renewal is.
// +kubebuilder:validation:Enum=Renewing;Succeeded;Failed;RolledBack
type RenewalState string

// Renewal states.
const (
	// RenewalRunning: the agent is renewing the certificates.
	RenewalRunning RenewalState = "Renewing"
	// RenewalSucceeded: the control plane serves the renewed certificates.
	RenewalSucceeded RenewalState = "Succeeded"
	// RenewalFailed: the renewal failed before the host was changed.
	RenewalFailed RenewalState = "Failed"
	// RenewalRolledBack: the renewal failed after the host was changed and
	// the agent put the previous certificates back.
	RenewalRolledBack RenewalState = "RolledBack"
)

// HostCertificatesRenewalStatus is an in-place renewal of a control
// plane's certificates, as the agent reports it.
type HostCertificatesRenewalStatus struct {
	// state is where the renewal is.
	State RenewalState `json:"state"`
	// startTime is when the renewal started, by the hub's clock.
	StartTime metav1.Time `json:"startTime"`
	// step is the step running, or the one that failed.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Step string `json:"step,omitempty"`
	// message says what failed and what the agent did about it.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// AgentReleaseStatus is the agent's account of its own releases.
type AgentReleaseStatus struct {
	// committed is the release committed after a trial; empty while the
	// agent runs the binary it was installed with.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Committed string `json:"committed,omitempty"`
	// floor is the lowest version the agent may run, from the releases it
	// has verified.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Floor string `json:"floor,omitempty"`
	// lastTrial is how the last trial of a new release ended.
	// +optional
	LastTrial *AgentTrialStatus `json:"lastTrial,omitempty"`
	// transfer is how getting the ordered release goes, until it runs.
	// +optional
	Transfer *AgentTransferStatus `json:"transfer,omitempty"`
	// onTrial is the release running on trial, until it commits.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	OnTrial string `json:"onTrial,omitempty"`
}

// AgentTransferState is where getting an ordered agent release is.
// +kubebuilder:validation:Enum=Fetching;Refused
type AgentTransferState string

// Transfer states.
const (
	// AgentTransferFetching: the binary is on its way from the hub.
	AgentTransferFetching AgentTransferState = "Fetching"
	// AgentTransferRefused: the agent will not run this release (its
	// signature, its platform, the version floor, or a binary that does
	// not match its bundle); it keeps the one it runs.
	AgentTransferRefused AgentTransferState = "Refused"
)

// AgentTransferStatus is how getting an ordered release goes.
type AgentTransferStatus struct {
	// version ordered.
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// state of the transfer.
	State AgentTransferState `json:"state"`
	// bytes received of totalBytes.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// reason of a refusal, one word (BadSignature, BelowFloor, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason,omitempty"`
	// message says what went wrong.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// AgentTrialState is how a trial of an agent release ended.
// +kubebuilder:validation:Enum=Committed;RolledBack
type AgentTrialState string

// Trial states.
const (
	// AgentTrialCommitted: the release reached the hub and passed its
	// checks in time; it runs from now on.
	AgentTrialCommitted AgentTrialState = "Committed"
	// AgentTrialRolledBack: it did not; the host went back by itself.
	AgentTrialRolledBack AgentTrialState = "RolledBack"
)

// AgentTrialStatus is one trial of an agent release.
type AgentTrialStatus struct {
	// version on trial.
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// from is the version that ran before.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	From string `json:"from,omitempty"`
	// state is how it ended.
	State AgentTrialState `json:"state"`
	// reason says why it was rolled back.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// time it ended.
	Time metav1.Time `json:"time"`
}

// StagingState is where the fetch of a Kubernetes version is.
// +kubebuilder:validation:Enum=Downloading;Staged;Failed
type StagingState string

// Staging states.
const (
	// StagingDownloading: the agent is fetching the archive (or waiting to
	// try again after a cut; see message).
	StagingDownloading StagingState = "Downloading"
	// StagingStaged: the version is staged on the host.
	StagingStaged StagingState = "Staged"
	// StagingFailed: the archive did not match its sha256 or was not a
	// staged version's layout; it is not fetched again until the release's
	// url or sha256 changes.
	StagingFailed StagingState = "Failed"
)

// HostStagingStatus is one Kubernetes version the agent fetches.
type HostStagingStatus struct {
	// version being staged.
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version"`
	// state of the fetch.
	State StagingState `json:"state"`
	// bytes of the archive on the host so far (reported in steps of a
	// tenth, to keep status writes few).
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// totalBytes of the archive, when the server told.
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// message says what went wrong, and what the agent does next.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// LinkProbeState says whether the agent's eBPF link probe runs.
// +kubebuilder:validation:Enum=Running;Unavailable
type LinkProbeState string

const (
	// LinkProbeRunning means retransmissions and drops are counted.
	LinkProbeRunning LinkProbeState = "Running"
	// LinkProbeUnavailable means the kernel or sandbox does not allow the
	// probe; only the round-trip time to the hub is measured.
	LinkProbeUnavailable LinkProbeState = "Unavailable"
)

// LinkHealth is what the agent measured of its network over one window.
type LinkHealth struct {
	// probe is the state of the eBPF probe.
	// +required
	Probe LinkProbeState `json:"probe"`
	// message says why the probe is unavailable.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// windowSeconds is the length of the window the counts cover.
	// +required
	// +kubebuilder:validation:Minimum=1
	WindowSeconds int32 `json:"windowSeconds"`
	// tcpRetransmits is the number of TCP segments the host retransmitted
	// in the window, on all its connections.
	// +optional
	TCPRetransmits int64 `json:"tcpRetransmits,omitempty"`
	// tcpRetransmitsToHub is the part of tcpRetransmits sent to the hub's
	// gateway port: the agent's own link.
	// +optional
	TCPRetransmitsToHub int64 `json:"tcpRetransmitsToHub,omitempty"`
	// packetDrops is the number of IP packets the host's kernel dropped in
	// the window.
	// +optional
	PacketDrops int64 `json:"packetDrops,omitempty"`
	// hubRTTMilliseconds is the round-trip time of a ping to the hub over
	// the agent's session, at the end of the window.
	// +optional
	HubRTTMilliseconds *int64 `json:"hubRTTMilliseconds,omitempty"`
	// observedTime is the end of the window.
	// +required
	ObservedTime metav1.Time `json:"observedTime"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=edgehosts,scope=Namespaced,categories=fleet,shortName=eh
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:metadata:labels="clusterctl.cluster.x-k8s.io/move-hierarchy=true"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Claimed-By",type="string",JSONPath=".spec.claimRef.name"
// +kubebuilder:printcolumn:name="Connected",type="string",JSONPath=".status.conditions[?(@.type=='AgentConnected')].status"
// +kubebuilder:printcolumn:name="Last-Seen",type="date",JSONPath=".status.lastSeenTime"
// +kubebuilder:printcolumn:name="Agent",type="string",JSONPath=".status.facts.agentVersion"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Zone",type="string",JSONPath=".metadata.labels.topology\\.kubernetes\\.io/zone",priority=1
// +kubebuilder:printcolumn:name="Link-Degraded",type="string",JSONPath=".status.conditions[?(@.type=='LinkDegraded')].status",priority=1
// +kubebuilder:printcolumn:name="OS",type="string",JSONPath=".status.facts.os",priority=1
// +kubebuilder:printcolumn:name="Arch",type="string",JSONPath=".status.facts.arch",priority=1
// +kubebuilder:printcolumn:name="Internal-IP",type="string",JSONPath=".status.addresses[?(@.type=='InternalIP')].address",priority=1
// +kubebuilder:printcolumn:name="Kubernetes",type="string",JSONPath=".status.kubernetesVersion",priority=1
// +kubebuilder:printcolumn:name="Upgrade",type="string",JSONPath=".status.upgrade.state",priority=1

// EdgeHost is one enrolled edge machine: the inventory Cluster API draws from.
type EdgeHost struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the hub wants of the host.
	// +optional
	Spec EdgeHostSpec `json:"spec,omitempty"`
	// status is what the agent reports and what the hub concludes.
	// +optional
	Status EdgeHostStatus `json:"status,omitempty"`
}

// GetConditions returns the host's conditions.
func (h *EdgeHost) GetConditions() []metav1.Condition { return h.Status.Conditions }

// SetConditions replaces the host's conditions.
func (h *EdgeHost) SetConditions(c []metav1.Condition) { h.Status.Conditions = c }

// +kubebuilder:object:root=true

// EdgeHostList is a list of EdgeHosts.
type EdgeHostList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeHost `json:"items"`
}

func init() {
	objectTypes = append(objectTypes, &EdgeHost{}, &EdgeHostList{})
}
