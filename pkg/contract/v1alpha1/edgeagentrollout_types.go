package v1alpha1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// AgentArtifact is one architecture's binary of a fleet-agent release.
type AgentArtifact struct {
	// arch is the CPU architecture, in GOARCH form, as hosts report it in
	// status.facts.arch.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
	Arch string `json:"arch"`

	// url the hub fetches the binary from, once, to serve it to the
	// agents through their sessions. http or https: the signed bundle
	// guards what arrives either way.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`

	// bundle is the signed release bundle, as `fleet-release sign` writes
	// it. Agents check it against root keys they hold from install time.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=8192
	Bundle string `json:"bundle"`
}

// EdgeAgentReleaseSpec is a signed fleet-agent release.
type EdgeAgentReleaseSpec struct {
	// version of fleet-agent the artifacts hold.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$`
	Version string `json:"version"`

	// artifacts, one per architecture.
	// +required
	// +listType=map
	// +listMapKey=arch
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Artifacts []AgentArtifact `json:"artifacts"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:path=edgeagentreleases,scope=Namespaced,categories=fleet,shortName=agentrelease
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".spec.version"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeAgentRelease makes a signed fleet-agent release available to the
// hosts of its namespace: an EdgeAgentRollout orders hosts to run it, and
// the hub serves the binary to their agents through their sessions.
type EdgeAgentRelease struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec EdgeAgentReleaseSpec `json:"spec"`
}

// Artifact is the release's artifact for arch, or nil.
func (r *EdgeAgentRelease) Artifact(arch string) *AgentArtifact {
	for i := range r.Spec.Artifacts {
		if r.Spec.Artifacts[i].Arch == arch {
			return &r.Spec.Artifacts[i]
		}
	}
	return nil
}

// +kubebuilder:object:root=true

// EdgeAgentReleaseList is a list of EdgeAgentReleases.
type EdgeAgentReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeAgentRelease `json:"items"`
}

// EdgeAgentRolloutSpec says which hosts move to which agent release, and
// how carefully.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.abort) || !oldSelf.abort || (has(self.abort) && self.abort)",message="an aborted roll-out stays aborted"
// +kubebuilder:validation:XValidation:rule="self.version == oldSelf.version",message="a roll-out's version cannot change: create another roll-out"
type EdgeAgentRolloutSpec struct {
	// version of fleet-agent to run; an EdgeAgentRelease of the namespace
	// must have it.
	// +required
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)([-+][0-9A-Za-z.+-]*)?$`
	Version string `json:"version"`

	// selector picks the EdgeHosts of the namespace to move; empty picks
	// them all.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// canary is the number of hosts in the first wave, alone; 0 skips it.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Canary *int32 `json:"canary,omitempty"`

	// waveSize is the number of hosts in each wave after the canary, or a
	// percentage of the hosts to move when the roll-out started.
	// +optional
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	WaveSize *intstr.IntOrString `json:"waveSize,omitempty"`

	// successThreshold is the share of a wave's hosts (a number or a
	// percentage) that must run the new release for the roll-out to go
	// on; once more fail than it allows, the roll-out stops.
	// +optional
	// +kubebuilder:default="100%"
	// +kubebuilder:validation:XIntOrString
	SuccessThreshold *intstr.IntOrString `json:"successThreshold,omitempty"`

	// maxUnavailable is how many hosts of one group (hosts sharing the
	// groupBy label's value) may be moving at once: a number, or a
	// percentage of the group rounded down, at least 1.
	// +optional
	// +kubebuilder:default="25%"
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// groupBy is the label whose value groups hosts for maxUnavailable
	// (a site, a shop); hosts without it form one group.
	// +optional
	// +kubebuilder:default="topology.kubernetes.io/zone"
	// +kubebuilder:validation:MaxLength=317
	GroupBy string `json:"groupBy,omitempty"`

	// trialDeadline is how long a host's new agent has, from its start,
	// to reach the hub and pass its checks; the host rolls back by
	// itself otherwise.
	// +optional
	// +kubebuilder:default="5m"
	TrialDeadline *metav1.Duration `json:"trialDeadline,omitempty"`

	// requireApproval holds each wave after the canary until
	// approvedWaves reaches its index (`kubectl fleet agent approve`).
	// +optional
	RequireApproval bool `json:"requireApproval,omitempty"`

	// approvedWaves is the highest wave index approved to start.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ApprovedWaves int32 `json:"approvedWaves,omitempty"`

	// paused stops new hosts from being moved; hosts moving finish.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// abort, once set, stops the roll-out and moves the hosts it moved
	// back to the release each ran before, the last wave first. It cannot
	// be unset.
	// +optional
	Abort bool `json:"abort,omitempty"`
}

// AgentRolloutPhase is where a roll-out is.
// +kubebuilder:validation:Enum=Progressing;Paused;WaitingForApproval;Complete;Failed;Aborting;Aborted
type AgentRolloutPhase string

// Roll-out phases.
const (
	AgentRolloutProgressing        AgentRolloutPhase = "Progressing"
	AgentRolloutPaused             AgentRolloutPhase = "Paused"
	AgentRolloutWaitingForApproval AgentRolloutPhase = "WaitingForApproval"
	AgentRolloutComplete           AgentRolloutPhase = "Complete"
	AgentRolloutFailed             AgentRolloutPhase = "Failed"
	AgentRolloutAborting           AgentRolloutPhase = "Aborting"
	AgentRolloutAborted            AgentRolloutPhase = "Aborted"
)

// AgentWaveState is where one wave is.
// +kubebuilder:validation:Enum=Pending;Progressing;Succeeded;Failed;Reverting;Reverted
type AgentWaveState string

// Wave states.
const (
	AgentWavePending     AgentWaveState = "Pending"
	AgentWaveProgressing AgentWaveState = "Progressing"
	AgentWaveSucceeded   AgentWaveState = "Succeeded"
	AgentWaveFailed      AgentWaveState = "Failed"
	AgentWaveReverting   AgentWaveState = "Reverting"
	AgentWaveReverted    AgentWaveState = "Reverted"
)

// AgentRolloutWave is one wave's account.
type AgentRolloutWave struct {
	// name is "canary" or "wave-<n>".
	// +kubebuilder:validation:MaxLength=32
	Name string `json:"name"`
	// state of the wave.
	State AgentWaveState `json:"state"`
	// planned is the number of hosts the wave takes.
	Planned int32 `json:"planned"`
	// hosts the wave took.
	// +optional
	Hosts int32 `json:"hosts"`
	// updated: hosts that run the new release, committed.
	// +optional
	Updated int32 `json:"updated"`
	// failed: hosts that rolled back or refused the release.
	// +optional
	Failed int32 `json:"failed"`
	// reverted: hosts an abort moved back.
	// +optional
	Reverted int32 `json:"reverted,omitempty"`
	// startTime is when the wave's first host was moved.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// completionTime is when the wave ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// message says what the wave waits for, or why it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// EdgeAgentRolloutStatus is how far the roll-out got.
type EdgeAgentRolloutStatus struct {
	// conditions: Progressing (True while hosts move), Complete (every
	// selected host runs the version).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// phase sums the conditions up.
	// +optional
	Phase AgentRolloutPhase `json:"phase,omitempty"`
	// hosts selected, updated (running the version, committed), failed.
	// +optional
	Hosts int32 `json:"hosts"`
	// +optional
	Updated int32 `json:"updated"`
	// +optional
	Failed int32 `json:"failed"`
	// currentWave is the index of the wave under way (or last run).
	// +optional
	CurrentWave int32 `json:"currentWave"`
	// waves, in order; planned when the roll-out starts.
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	Waves []AgentRolloutWave `json:"waves,omitempty"`
	// startTime and completionTime of the roll-out.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// observedGeneration is the spec generation this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=edgeagentrollouts,scope=Namespaced,categories=fleet,shortName=agentrollout
// +kubebuilder:printcolumn:name="Version",type="string",JSONPath=".spec.version"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Wave",type="integer",JSONPath=".status.currentWave"
// +kubebuilder:printcolumn:name="Hosts",type="integer",JSONPath=".status.hosts"
// +kubebuilder:printcolumn:name="Updated",type="integer",JSONPath=".status.updated"
// +kubebuilder:printcolumn:name="Failed",type="integer",JSONPath=".status.failed"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"

// EdgeAgentRollout moves the agents of the hosts it selects to a
// fleet-agent release, in waves: a canary, then batches, each held to a
// success threshold, never more than maxUnavailable hosts of a group at
// once. Each host tries the release on trial and rolls back by itself if
// it fails; an abort moves the hosts already moved back.
type EdgeAgentRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec EdgeAgentRolloutSpec `json:"spec"`
	// +optional
	Status EdgeAgentRolloutStatus `json:"status,omitempty"`
}

// GetConditions returns the roll-out's conditions.
func (r *EdgeAgentRollout) GetConditions() []metav1.Condition { return r.Status.Conditions }

// SetConditions replaces the roll-out's conditions.
func (r *EdgeAgentRollout) SetConditions(conds []metav1.Condition) { r.Status.Conditions = conds }

// +kubebuilder:object:root=true

// EdgeAgentRolloutList is a list of EdgeAgentRollouts.
type EdgeAgentRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeAgentRollout `json:"items"`
}

// AgentReleaseOrder is the order an EdgeAgentRollout gives one host, kept
// as JSON in the host's AgentReleaseAnnotation; the hub sends it on to
// the host's agent.
type AgentReleaseOrder struct {
	// Version the host must run.
	Version string `json:"version"`
	// Rollout and Wave that ordered it.
	Rollout string `json:"rollout"`
	Wave    int32  `json:"wave"`
	// From is the version the host ran before the roll-out moved it.
	From string `json:"from,omitempty"`
	// Revert marks an abort's order back to From's release.
	Revert bool `json:"revert,omitempty"`
	// TrialSeconds the new release has to commit.
	TrialSeconds int32 `json:"trialSeconds,omitempty"`
	// Since is when the order was given.
	Since metav1.Time `json:"since"`
}

// AgentReleaseOrderOf is the roll-out order on h, nil when it has none or
// it does not parse.
func AgentReleaseOrderOf(h *EdgeHost) *AgentReleaseOrder {
	raw, ok := h.Annotations[AgentReleaseAnnotation]
	if !ok {
		return nil
	}
	o := &AgentReleaseOrder{}
	if err := json.Unmarshal([]byte(raw), o); err != nil || o.Version == "" {
		return nil
	}
	return o
}

func init() {
	objectTypes = append(objectTypes, &EdgeAgentRelease{}, &EdgeAgentReleaseList{}, &EdgeAgentRollout{}, &EdgeAgentRolloutList{})
}
