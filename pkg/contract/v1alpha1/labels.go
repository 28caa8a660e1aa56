package v1alpha1

// Labels, annotations and finalizers that fleet defines.
const (
	// ZoneLabel on an EdgeHost names its failure domain. It is the well-known
	// Kubernetes topology label, so operators can reuse what they already tag.
	ZoneLabel = "topology.kubernetes.io/zone"

	// InterruptibleLabel on an EdgeHost, set to "true", marks it as a machine
	// that may go away at any time (for example a shared or battery-backed
	// device). Cluster API then labels its Node cluster.x-k8s.io/interruptible.
	InterruptibleLabel = "fleet.edgefleet.io/interruptible"

	// ClaimedByLabel on an EdgeHost carries the name of the EdgeMachine that
	// holds it, so `kubectl get edgehosts -l` can find a machine's host.
	ClaimedByLabel = "fleet.edgefleet.io/claimed-by"

	// ClusterLabel on a claimed EdgeHost names the Cluster its machine
	// belongs to; the hub finds the agents that can carry a cluster's
	// edge-reach tunnels by it.
	ClusterLabel = "fleet.edgefleet.io/cluster"

	// ControlPlaneLabel on a claimed EdgeHost, set to "true", marks a host
	// whose machine is in its cluster's control plane: the cluster's
	// endpoint resolves to these hosts, and tunnels prefer them.
	ControlPlaneLabel = "fleet.edgefleet.io/control-plane"

	// EndpointDomain is the DNS zone of the endpoint names fleet gives
	// clusters (<cluster>.<namespace>.fleet.internal). No DNS server knows
	// it: agents make these names resolve at their sites themselves, and
	// leave every other name to the site's DNS.
	EndpointDomain = "fleet.internal"

	// EdgeReachAnnotation on a Cluster, set to "disabled", keeps the hub
	// from routing Cluster API's connections to it through the agents (for
	// a cluster whose API server the management cluster can dial itself).
	EdgeReachAnnotation = "fleet.edgefleet.io/edge-reach"

	// EnrollmentKeyAnnotation on an EdgeHost names the public key its
	// enrollment certified ("sha256:<hex of the SubjectPublicKeyInfo>"):
	// an agent whose enrollment answer was lost retries with the same key
	// and is given the same host, not a second one.
	EnrollmentKeyAnnotation = "fleet.edgefleet.io/enrollment-key"

	// ClientKeyAnnotation on an EdgeHost names the public key of the host's
	// current client certificate (same form as EnrollmentKeyAnnotation):
	// only that certificate opens sessions, so a rotation retires the one
	// before it. PreviousClientKeyAnnotation names the key a rotation
	// replaced; it is honoured until the new certificate is first used.
	ClientKeyAnnotation         = "fleet.edgefleet.io/client-key"
	PreviousClientKeyAnnotation = "fleet.edgefleet.io/previous-client-key"

	// ReachCredentialEpochAnnotation on a Cluster is mixed into its
	// edge-reach proxy credential: bumping it (`kubectl fleet kubeconfig
	// CLUSTER --rotate-credential`) retires a leaked credential.
	ReachCredentialEpochAnnotation = "fleet.edgefleet.io/reach-credential-epoch"

	// AgentReleaseAnnotation on an EdgeHost holds, as JSON, the order of
	// the EdgeAgentRollout that moves it (AgentReleaseOrder): the agent
	// release the host must run. The roll-out controller writes it; the
	// gateway sends it only while that roll-out is under way.
	AgentReleaseAnnotation = "fleet.edgefleet.io/agent-release"

	// EdgeClusterFinalizer lets the hub clean up before an EdgeCluster goes.
	EdgeClusterFinalizer = "edgecluster.infrastructure.cluster.x-k8s.io"

	// EdgeMachineFinalizer lets the hub release the host before an
	// EdgeMachine goes.
	EdgeMachineFinalizer = "edgemachine.infrastructure.cluster.x-k8s.io"

	// HostProtectionFinalizer keeps a claimed or still-dirty EdgeHost from
	// being deleted under a Machine (the PersistentVolume protection pattern).
	HostProtectionFinalizer = "edgehost.infrastructure.cluster.x-k8s.io/protection"
)

// Condition types and reasons that fleet sets. Ready and Paused come from
// Cluster API and are spelled the same.
const (
	// ReadyCondition summarises an object's other conditions.
	ReadyCondition = "Ready"
	// PausedCondition is True while Cluster API has paused the object.
	PausedCondition = "Paused"

	// ControlPlaneEndpointReadyCondition is True once an EdgeCluster knows
	// the endpoint of its control plane.
	ControlPlaneEndpointReadyCondition = "ControlPlaneEndpointReady"
	// ControlPlaneEndpointMissingReason: neither the EdgeCluster nor the
	// Cluster names a control-plane endpoint.
	ControlPlaneEndpointMissingReason = "ControlPlaneEndpointMissing"
	// ControlPlaneEndpointSetReason: the endpoint is known.
	ControlPlaneEndpointSetReason = "ControlPlaneEndpointSet"

	// BootstrapDataReadyCondition is True once the Machine's bootstrap data
	// exists and is something an agent can run.
	BootstrapDataReadyCondition = "BootstrapDataReady"
	// WaitingForClusterInfrastructureReason: the Cluster's infrastructure is
	// not provisioned yet.
	WaitingForClusterInfrastructureReason = "WaitingForClusterInfrastructure"
	// WaitingForBootstrapDataReason: the Machine has no bootstrap data secret yet.
	WaitingForBootstrapDataReason = "WaitingForBootstrapData"
	// BootstrapDataInvalidReason: the bootstrap data secret cannot be used.
	BootstrapDataInvalidReason = "BootstrapDataInvalid"
	// BootstrapDataAvailableReason: the bootstrap data is ready for an agent.
	BootstrapDataAvailableReason = "BootstrapDataAvailable"

	// HostClaimedCondition is True while an EdgeMachine holds an EdgeHost.
	HostClaimedCondition = "HostClaimed"
	// WaitingForHostReason: no Available host matches the machine.
	WaitingForHostReason = "WaitingForHost"
	// InvalidHostSelectorReason: spec.hostSelector cannot be parsed.
	InvalidHostSelectorReason = "InvalidHostSelector"
	// HostClaimedReason: the machine holds a host.
	HostClaimedReason = "HostClaimed"
	// HostLostReason: the host the machine held is gone or was released.
	HostLostReason = "HostLost"
	// HostNotFoundReason: the EdgeHost the machine's spec.providerID names
	// does not exist (a hub restored from a backup without it). The machine
	// waits for it and never claims another host.
	HostNotFoundReason = "HostNotFound"
	// DuplicateClaimReason: two EdgeHosts hold the machine's claim, or two
	// machines name one host (a restore that duplicated objects). The hub
	// resolves neither by resetting a host: an operator deletes the copy.
	DuplicateClaimReason = "DuplicateClaim"
	// HostHoldsOtherWorkloadReason: the claimed host's agent still runs the
	// workload of another claim, which it resets only on an explicit order.
	HostHoldsOtherWorkloadReason = "HostHoldsOtherWorkload"

	// HostProvisionedCondition is True once the agent on the claimed host
	// has run the bootstrap data and reported the host's providerID.
	HostProvisionedCondition = "HostProvisioned"
	// WaitingForAgentReason: the agent has not started on the assignment.
	WaitingForAgentReason = "WaitingForAgent"
	// ProvisioningReason: the agent is running the bootstrap data.
	ProvisioningReason = "Provisioning"
	// ProvisioningFailedReason: the agent reported a failed bootstrap.
	ProvisioningFailedReason = "ProvisioningFailed"
	// ProvisionedReason: the host is provisioned.
	ProvisionedReason = "Provisioned"

	// AgentConnectedCondition on an EdgeHost is True while its agent holds a
	// session to the hub, judged by the hub's clock.
	AgentConnectedCondition = "AgentConnected"

	// HostAgentConnectedCondition on an EdgeMachine mirrors the
	// AgentConnected condition of the host it holds. It is part of the
	// machine's Ready, which Cluster API mirrors into the Machine's
	// InfrastructureReady: a MachineHealthCheck with
	// unhealthyMachineConditions InfrastructureReady=False thus replaces a
	// machine whose agent has been gone too long.
	HostAgentConnectedCondition = "HostAgentConnected"
	// AgentConnectedReason: the host's agent holds a session to the hub.
	AgentConnectedReason = "AgentConnected"
	// AgentDisconnectedReason: the host's agent has been gone longer than
	// the hub's disconnect grace.
	AgentDisconnectedReason = "AgentDisconnected"
	// AgentConnectivityUnknownReason: the hub cannot tell (the replica
	// that held the session stopped, or nothing was recorded yet).
	AgentConnectivityUnknownReason = "AgentConnectivityUnknown"

	// KubernetesVersionCondition on an EdgeMachine is True while its host
	// runs the Machine's spec.version, False while an in-place upgrade is
	// ordered, running or failed, or cannot be ordered. It is not part of
	// Ready: a host whose upgrade failed and was rolled back still serves.
	KubernetesVersionCondition = "KubernetesVersion"
	// KubernetesVersionUpToDateReason: the host runs the Machine's version.
	KubernetesVersionUpToDateReason = "UpToDate"
	// UpgradingReason: the host's agent was ordered to upgrade, or is at it.
	UpgradingReason = "Upgrading"
	// UpgradeFailedReason: the upgrade failed; the message says at which
	// step and whether the host was rolled back. A new order retries it.
	UpgradeFailedReason = "UpgradeFailed"
	// VersionNotStagedReason: the host cannot get the Machine's version;
	// nothing was ordered.
	VersionNotStagedReason = "VersionNotStaged"
	// AgentCannotUpgradeReason: the host's agent reports no Kubernetes
	// version (too old, or not run by a service manager); nothing was
	// ordered.
	AgentCannotUpgradeReason = "AgentCannotUpgrade"

	// AgentVersionUnsupportedCondition on an EdgeHost is True while the
	// hub refuses its agent's sessions because the two share no protocol
	// version (docs/PROTOCOL.md, "Version skew"); False once an agent of
	// the host is served again. Hosts never refused do not carry it.
	AgentVersionUnsupportedCondition = "AgentVersionUnsupported"
	// AgentTooOldReason: the agent speaks only protocol versions older
	// than the hub's; upgrade the agent.
	AgentTooOldReason = "AgentTooOld"
	// AgentTooNewReason: the agent speaks only protocol versions newer
	// than the hub's; upgrade the hub (hubs go first).
	AgentTooNewReason = "AgentTooNew"
	// AgentVersionSupportedReason: the host's agent is served again.
	AgentVersionSupportedReason = "AgentVersionSupported"

	// LinkDegradedCondition on an EdgeHost is True while the link health
	// its agent reports is over the hub's thresholds (retransmissions to
	// the hub per minute, round-trip time), Unknown before any report.
	LinkDegradedCondition = "LinkDegraded"
	// LinkDegradedReason: over a threshold.
	LinkDegradedReason = "LinkDegraded"
	// LinkHealthyReason: under every threshold.
	LinkHealthyReason = "LinkHealthy"
	// LinkNotReportedReason: the agent has reported no link health yet.
	LinkNotReportedReason = "LinkNotReported"

	// StateUnwritableCondition on an EdgeHost is True while its agent
	// cannot write its state directory (a full disk, a file system turned
	// read-only): what it did holds and is reported, but a restart would
	// not find it. False once the agent recorded it; hosts never affected
	// do not carry it.
	StateUnwritableCondition = "StateUnwritable"
	// StateUnwritableReason: the agent's last write of its state failed.
	StateUnwritableReason = "StateUnwritable"
	// StateRecordedReason: the agent wrote its state again.
	StateRecordedReason = "StateRecorded"

	// ClockSkewedCondition on an EdgeHost is True while its agent measures
	// its clock a minute or more off the hub's (a dead battery, no NTP):
	// fleet's own work goes on by the hub's clock, but the host's logs and
	// Kubernetes' certificate checks on it are off. False once it is back
	// within a minute; hosts never skewed do not carry it.
	ClockSkewedCondition = "ClockSkewed"
	// ClockSkewedReason: the host's clock is off the hub's.
	ClockSkewedReason = "ClockSkewed"
	// ClockSynchronizedReason: the host's clock agrees with the hub's again.
	ClockSynchronizedReason = "ClockSynchronized"
)

// Manual approval of enrolled hosts.
const (
	// ApprovalLabel on an EdgeHost enrolled with a token that requires
	// approval: "pending" until an operator sets it to "approved". A pending
	// host connects and reports but is never claimed.
	ApprovalLabel = "fleet.edgefleet.io/approval"
	// ApprovalPending is the value while the host waits for an operator.
	ApprovalPending = "pending"
	// ApprovalApproved is the value an operator sets to admit the host.
	ApprovalApproved = "approved"
)

// ReleasedAtGenerationAnnotation on an EdgeHost records the generation at
// which its last claim was released. The host is Deprovisioning until its
// agent reports having observed that generation (and a clean host).
const ReleasedAtGenerationAnnotation = "fleet.edgefleet.io/released-at-generation"

// Operator requests on an EdgeHost, honoured by the hub (which alone writes
// the host's spec and finalizers).
const (
	// RemoveAnnotation on an EdgeHost, set to RemoveForce before the host
	// is deleted (`kubectl fleet host remove --force`), lets the deletion
	// give up what it would otherwise wait for: the claim of a Machine the
	// host still serves, and the reset of a host whose agent is gone or
	// whose reset failed.
	RemoveAnnotation = "fleet.edgefleet.io/remove"
	// RemoveForce is RemoveAnnotation's one value.
	RemoveForce = "force"
	// RemovedByAnnotation names the user who asked for the forced removal,
	// for the Events that record what was given up.
	RemovedByAnnotation = "fleet.edgefleet.io/removed-by"

	// RetryResetAnnotation on an EdgeHost is a counter an operator raises
	// (`kubectl fleet host retry`) to have a failed reset ordered again:
	// the hub copies it into spec.resetRetries.
	RetryResetAnnotation = "fleet.edgefleet.io/retry-reset"
)

// ReleasedClaimAnnotation on an EdgeHost names the claim (claim ID) its last
// release gave up, and the uid of the EdgeHost incarnation that released
// it: "<claim ID> <EdgeHost uid>". Only a workload the hub released is
// deprovisioned; one it does not know of (a hub restored from a backup
// older than the claim) is left running and reported (NeedsAttention).
const ReleasedClaimAnnotation = "fleet.edgefleet.io/released-claim"

// ClaimOrphanedSinceAnnotation on an EdgeHost is when the hub first found
// the EdgeMachine its claim names missing (RFC 3339). The claim is released
// only once that has lasted OrphanGrace: a restore re-creates EdgeHosts
// before EdgeMachines, and clusterctl move deletes a source's EdgeMachines
// before its EdgeHosts.
const ClaimOrphanedSinceAnnotation = "fleet.edgefleet.io/claim-orphaned-since"

// ClaimIDAnnotation on an EdgeMachine is the ID of its claim on a host: the
// uid the EdgeMachine had when it first claimed one. Hosts (spec.claimRef.uid)
// and agents know the claim by this ID, which survives a restore from backup
// (a restored EdgeMachine has a new uid and the same annotations). Set by the
// hub; absent, the claim ID is the EdgeMachine's uid.
const ClaimIDAnnotation = "fleet.edgefleet.io/claim-id"

// CordonedLabel on an EdgeHost, set to "true", keeps it from being claimed
// by new machines; a machine that holds it keeps it.
const CordonedLabel = "fleet.edgefleet.io/cordoned"
