package wire

import (
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Protocol versions are numbered; a frame's envelope names the version it
// is written in, "fleet.edgefleet.io/v<N>". A session speaks the highest
// version both sides speak (Negotiate). Hello and Error keep their shape
// in every version, so two releases that share none can still say why.
const (
	// ProtocolGroup prefixes every version's name.
	ProtocolGroup = "fleet.edgefleet.io"
	// MinProtocol is the oldest version this release speaks.
	MinProtocol = 1
	// MaxProtocol is the newest version this release speaks. Version 2
	// added Welcome, the hub's answer to Hello.
	MaxProtocol = 2
)

// Protocol names version 1, the version a Hello is written in: hubs that
// predate negotiation read no other.
const Protocol = ProtocolGroup + "/v1"

// ProtocolName is the envelope's name of version v.
func ProtocolName(v int) string { return ProtocolGroup + "/v" + strconv.Itoa(v) }

// ProtocolRange is the protocol versions one side speaks.
type ProtocolRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// Speaks is the range this release speaks.
var Speaks = ProtocolRange{Min: MinProtocol, Max: MaxProtocol}

func (r ProtocolRange) String() string {
	if r.Min == r.Max {
		return "v" + strconv.Itoa(r.Min)
	}
	return "v" + strconv.Itoa(r.Min) + "–v" + strconv.Itoa(r.Max)
}

// Negotiate is the highest version both ranges hold; ok is false when they
// share none.
func Negotiate(a, b ProtocolRange) (version int, ok bool) {
	v := min(a.Max, b.Max)
	return v, v >= max(a.Min, b.Min) && v >= 1
}

// Type names a message type.
type Type string

// Message types.
const (
	// TypeHello is the agent's first message on a session.
	TypeHello Type = "Hello"
	// TypeDesiredState is the hub's full desired state for the host.
	TypeDesiredState Type = "DesiredState"
	// TypeStatus is the agent's full status report.
	TypeStatus Type = "Status"
	// TypeCertificateRequest asks the hub to renew the agent's certificate.
	TypeCertificateRequest Type = "CertificateRequest"
	// TypeCertificate carries a renewed certificate.
	TypeCertificate Type = "Certificate"
	// TypeError reports a problem; fatal codes are followed by a close.
	TypeError Type = "Error"
	// TypeTunnel is the first frame of a stream the hub opens: dial the
	// target and carry bytes. It never appears on the control stream.
	TypeTunnel Type = "Tunnel"
	// TypeTunnelReady answers a Tunnel: the dial worked, raw bytes follow.
	TypeTunnelReady Type = "TunnelReady"
	// TypeWelcome is the hub's answer to Hello, from version 2.
	TypeWelcome Type = "Welcome"
	// TypeLogs is the first frame of a stream the hub opens to read one
	// of the agent's logs; TypeLogsReady answers it, raw bytes follow.
	TypeLogs      Type = "Logs"
	TypeLogsReady Type = "LogsReady"
	// TypeFactsRequest is the first frame of a stream the hub opens to
	// learn what the agent knows of its host; TypeFactsReport answers.
	TypeFactsRequest Type = "FactsRequest"
	TypeFactsReport  Type = "FactsReport"
)

// since is the first protocol version each message type is part of; a
// side never writes a type into a session of an older version.
var since = map[Type]int{TypeWelcome: 2}

// Since is the first protocol version that has message type t.
func Since(t Type) int { return max(since[t], 1) }

// MaxTunnelFrameSize bounds a Tunnel or TunnelReady frame.
const MaxTunnelFrameSize = 4 << 10

// Hello opens a session. The hub knows who the agent is from its client
// certificate; Host is checked against it, never trusted on its own.
type Hello struct {
	// AgentVersion is the fleet-agent release.
	AgentVersion string `json:"agentVersion"`
	// Host is the EdgeHost name the agent believes it is.
	Host string `json:"host"`
	// ObservedGeneration is the last desired-state generation the agent
	// has acted on, so the hub can tell a resync from news.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Capabilities lists what this agent can do beyond the base protocol,
	// so a hub never asks an older agent for something it cannot do.
	Capabilities []string `json:"capabilities,omitempty"`
	// Protocols is the range of protocol versions the agent speaks; agents
	// that predate negotiation send none and speak version 1 alone.
	Protocols *ProtocolRange `json:"protocols,omitempty"`
}

// Speaks is the range of versions the Hello's agent speaks.
func (h *Hello) Speaks() ProtocolRange {
	if h.Protocols == nil {
		return ProtocolRange{Min: 1, Max: 1}
	}
	return *h.Protocols
}

// Welcome answers Hello on sessions of version 2 and later, in the
// session's version (which its envelope names): who the hub is.
type Welcome struct {
	// HubVersion is the fleet-hub release.
	HubVersion string `json:"hubVersion"`
	// Capabilities lists what this hub can do beyond the base protocol.
	Capabilities []string `json:"capabilities,omitempty"`
	// Time is the hub's clock as it sent the Welcome: the agent times its
	// certificate rotations by the hub's clock, which judges them, and
	// reports how far its own is off. Hubs that predate it send none.
	Time *metav1.MicroTime `json:"time,omitempty"`
}

// CapabilityTunnel says the agent serves Tunnel streams (edge reach). An agent
// without it never accepts a stream; asking would stall until the session
// is torn down.
const CapabilityTunnel = "tunnel"

// DesiredState is everything the hub wants of a host. Exactly one of
// Assignment and Deprovision is set, or neither (nothing to do).
type DesiredState struct {
	// Generation of the EdgeHost spec this state was computed from. An agent
	// never acts on a generation older than one it has acted on.
	Generation int64 `json:"generation"`
	// HostUID is the uid of the EdgeHost whose generation this is. A hub
	// restored from a backup re-creates the EdgeHost under a new uid, whose
	// generations count from 1 again: an agent that sees a new HostUID
	// starts counting afresh (its workload stays). Empty from hubs that
	// predate it.
	HostUID types.UID `json:"hostUID,omitempty"`
	// Assignment is the Machine the host must become.
	Assignment *Assignment `json:"assignment,omitempty"`
	// Deprovision orders the agent to reset the host to clean.
	Deprovision bool `json:"deprovision,omitempty"`
	// Reach, set while the host belongs to a cluster, says how that
	// cluster's API endpoint is reached at the site. It can change without
	// a new generation (control-plane hosts come and go); agents apply the
	// latest one they receive.
	Reach *Reach `json:"reach,omitempty"`
	// Stage lists the Kubernetes versions the host should fetch and keep
	// staged, from the EdgeKubernetesReleases that select it. Like Reach it
	// changes without a new generation; agents act on the latest one.
	Stage []StageOrder `json:"stage,omitempty"`
	// AgentRelease, sent only to agents with CapabilitySelfUpdate, is the
	// fleet-agent release the host must run. Like Reach it changes without
	// a new generation; agents act on the latest one.
	AgentRelease *AgentReleaseOrder `json:"agentRelease,omitempty"`
}

// MaxStageOrders bounds DesiredState.Stage (and Status.Staging).
const MaxStageOrders = 8

// StageOrder is one version to fetch, check and stage.
type StageOrder struct {
	// Version is the Kubernetes version the archive holds.
	Version string `json:"version"`
	// URL of the archive (a tar file, gzipped or not): http, https, or
	// oci://REGISTRY/REPOSITORY[:TAG] (sent only to agents with
	// CapabilityStageFromOCI); empty when Hub.
	URL string `json:"url,omitempty"`
	// SHA256 of the archive, hex.
	SHA256 string `json:"sha256"`
	// Hub: the agent asks the hub for the archive's bytes through its
	// session (ReleaseRequest), by SHA256. Sent only to agents with
	// CapabilityStageFromHub.
	Hub bool `json:"hub,omitempty"`
}

// CapabilityStageFromHub says the agent takes a StageOrder's archive
// through its session when the order says Hub.
const CapabilityStageFromHub = "stagefromhub"

// CapabilityStageFromOCI says the agent fetches a StageOrder's archive
// from an oci:// URL (a blob of an OCI registry's repository, by its
// sha256); older agents refuse such an order.
const CapabilityStageFromOCI = "stagefromoci"

// MaxReachAddresses bounds Reach.Addresses.
const MaxReachAddresses = 16

// Reach is the site-local view of a cluster's API endpoint.
type Reach struct {
	// Endpoint is the cluster's controlPlaneEndpoint as host:port; the
	// only target the agent will dial for a tunnel.
	Endpoint string `json:"endpoint"`
	// Addresses are where the endpoint's name resolves at the site, best
	// first: the host itself (127.0.0.1) on a control-plane host whose API
	// server runs (or that is the first one), then the provisioned
	// control-plane hosts' addresses. Used for names in fleet's own zone
	// (v1alpha1.EndpointDomain) only; other names are the site DNS's.
	Addresses []string `json:"addresses,omitempty"`
	// Tunnels is true when the agent may carry the hub's connections to
	// the endpoint (edge reach is not disabled for the cluster).
	Tunnels bool `json:"tunnels,omitempty"`
}

// SameReach reports whether a and b say the same (both nil counts).
func SameReach(a, b *Reach) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Endpoint == b.Endpoint && a.Tunnels == b.Tunnels && slices.Equal(a.Addresses, b.Addresses)
}

// Tunnel asks the agent to dial Target and carry the stream's bytes.
type Tunnel struct {
	// Target is host:port; it must be the agent's Reach.Endpoint.
	Target string `json:"target"`
}

// TunnelReady tells the hub the dial worked.
type TunnelReady struct {
	// Address is the address actually dialled, for the hub's logs.
	Address string `json:"address,omitempty"`
}

// Assignment is one Machine's bootstrap, as the agent must run it.
type Assignment struct {
	// ClaimUID identifies the claim (the EdgeMachine's uid); the agent
	// reports it back so the hub knows which assignment a status is about.
	ClaimUID types.UID `json:"claimUID"`
	// MachineName is the EdgeMachine's name, for logs and the node name.
	MachineName string `json:"machineName"`
	// ProviderID is what the agent must give the kubelet and report.
	ProviderID string `json:"providerID"`
	// BootstrapFormat is "cloud-config".
	BootstrapFormat string `json:"bootstrapFormat"`
	// BootstrapData is the bootstrap provider's output, verbatim.
	BootstrapData []byte `json:"bootstrapData"`
	// KubernetesVersion is the version the Machine runs. Once provisioned,
	// another version than the host's is an order to upgrade in place;
	// empty orders nothing (hubs that predate it send none).
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// CertificatesRenewBeforeDays, on a control plane, is a standing order
	// to renew its certificates in place once they expire within this many
	// days (checked on arrival and daily, at most once a day); 0 never.
	CertificatesRenewBeforeDays int32 `json:"certificatesRenewBeforeDays,omitempty"`
}

// MaxCertificatesRenewBeforeDays bounds
// Assignment.CertificatesRenewBeforeDays: kubeadm's longest validity.
const MaxCertificatesRenewBeforeDays = 1095

// Status is the agent's full report. Each one replaces the last.
type Status struct {
	// ObservedGeneration is the desired-state generation acted on.
	ObservedGeneration int64 `json:"observedGeneration"`
	// Facts about the machine.
	Facts infrav1.HostFacts `json:"facts"`
	// Addresses of the machine.
	Addresses infrav1.MachineAddresses `json:"addresses,omitempty"`
	// Provisioning is the workload on the host; nil when clean.
	Provisioning *infrav1.HostProvisioningStatus `json:"provisioning,omitempty"`
	// ProviderID given to the kubelet.
	ProviderID string `json:"providerID,omitempty"`
	// NodeName the kubelet registered.
	NodeName string `json:"nodeName,omitempty"`
	// CertificatesExpiryDate is the earliest kubeadm/kubelet certificate expiry.
	CertificatesExpiryDate *metav1.Time `json:"certificatesExpiryDate,omitempty"`
	// Link is the link health of the last window; nil until the first.
	Link *infrav1.LinkHealth `json:"link,omitempty"`
	// KubernetesVersion is the kubelet's version once provisioned; agents
	// that cannot upgrade in place leave it empty.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Upgrade is the last in-place upgrade.
	Upgrade *infrav1.HostUpgradeStatus `json:"upgrade,omitempty"`
	// CertificatesRenewal is the last in-place certificate renewal.
	CertificatesRenewal *infrav1.HostCertificatesRenewalStatus `json:"certificatesRenewal,omitempty"`
	// Staging is how the fetches of the versions in Stage went.
	Staging []infrav1.HostStagingStatus `json:"staging,omitempty"`
	// AgentRelease is the agent's account of its own releases; agents
	// that cannot replace themselves send none.
	AgentRelease *infrav1.AgentReleaseStatus `json:"agentRelease,omitempty"`
	// StateUnwritable says why the agent cannot record what it did in its
	// state directory (full, read-only); empty while it can. What it
	// reports holds meanwhile, but would not survive a restart.
	StateUnwritable string `json:"stateUnwritable,omitempty"`
	// ClockSkew is how far the host's clock is ahead of the hub's
	// (negative: behind), as measured from the hub's Welcome, when it is
	// at least a minute (MinClockSkew); nil otherwise.
	ClockSkew *metav1.Duration `json:"clockSkew,omitempty"`
}

// MinClockSkew is the smallest clock skew an agent reports: less is what
// NTP and a session's round trip leave.
const MinClockSkew = time.Minute

// CertificateRequest asks for a new client certificate for the session's
// identity, made from a fresh key that never leaves the host.
type CertificateRequest struct {
	// CSR is a PEM-encoded PKCS#10 certificate signing request.
	CSR []byte `json:"csr"`
}

// Certificate answers a CertificateRequest.
type Certificate struct {
	// Certificate is the PEM-encoded client certificate.
	Certificate []byte `json:"certificate"`
}

// ErrorCode classifies an Error.
type ErrorCode string

// Error codes.
const (
	// ErrBadFrame: the frame could not be decoded. Fatal.
	ErrBadFrame ErrorCode = "BadFrame"
	// ErrFrameTooLarge: the frame exceeded the size limit. Fatal.
	ErrFrameTooLarge ErrorCode = "FrameTooLarge"
	// ErrUnsupportedProtocol: the two sides share no protocol version, or
	// the hub does not serve this agent's release. Fatal.
	ErrUnsupportedProtocol ErrorCode = "UnsupportedProtocol"
	// ErrUnknownType: a message type this side does not know. Fatal.
	ErrUnknownType ErrorCode = "UnknownType"
	// ErrUnexpected: a known message in the wrong place (e.g. no Hello first). Fatal.
	ErrUnexpected ErrorCode = "Unexpected"
	// ErrForbidden: the message is about another host. Fatal.
	ErrForbidden ErrorCode = "Forbidden"
	// ErrRevoked: the host's identity was revoked; re-enroll. Fatal.
	ErrRevoked ErrorCode = "Revoked"
	// ErrUnknownHost: the hub has no EdgeHost of the name the certificate
	// carries (not yet restored from a backup, or deleted while the agent
	// was away). The agent keeps its identity and its workload and retries
	// with backoff; it never resets or enrolls again on its own for this.
	// Sent as the HTTP refusal of a session (404), and on a session whose
	// EdgeHost clusterctl move took to another hub cluster.
	ErrUnknownHost ErrorCode = "UnknownHost"
	// ErrRejected: a request was refused (e.g. a bad CSR); the session goes on.
	ErrRejected ErrorCode = "Rejected"
	// ErrInternal: the other side failed; retry later.
	ErrInternal ErrorCode = "Internal"
	// ErrDialFailed: a tunnel's target could not be dialled. Ends the
	// stream only.
	ErrDialFailed ErrorCode = "DialFailed"
)

// Error reports a problem to the peer.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// SHA256 names the bytes a refused ReleaseRequest asked for, so the
	// agent stops waiting for them.
	SHA256 string `json:"sha256,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }
