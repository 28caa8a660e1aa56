package wire

import "fmt"

// Agent releases and hub-carried Kubernetes versions: the hub orders a host's agent to run a release
// (DesiredState.AgentRelease); an agent that lacks the binary asks for it
// (ReleaseRequest, on the control stream) and the hub opens a stream
// that starts with ReleaseData and carries the binary's bytes from the
// offset asked. Only agents that announce CapabilitySelfUpdate get
// orders; the agent checks every byte against the signed bundle with
// roots it holds from install time, so the hub alone cannot push code.
// The same two messages carry a Kubernetes version's archive that a
// StageOrder with Hub set names by its sha256 (CapabilityStageFromHub).
const (
	// CapabilitySelfUpdate says the agent runs the releases it is
	// ordered to, on trial, and fetches them through the session.
	CapabilitySelfUpdate = "selfupdate"

	// TypeReleaseRequest asks the hub for a release binary's bytes from
	// an offset (agent to hub, on the control stream).
	TypeReleaseRequest Type = "ReleaseRequest"
	// TypeReleaseData is the first frame of a stream the hub opens to
	// carry the bytes a ReleaseRequest asked for; raw bytes follow.
	TypeReleaseData Type = "ReleaseData"
)

// MaxReleaseBundleSize bounds AgentReleaseOrder.Bundle.
const MaxReleaseBundleSize = 8 << 10

// MaxReleaseSize bounds a release binary the hub serves.
const MaxReleaseSize = 256 << 20

// MaxTransferSize bounds anything a ReleaseData stream carries: a
// Kubernetes version's archive (images included) is far larger than an
// agent binary.
const MaxTransferSize = 8 << 30

// AgentReleaseOrder says which fleet-agent release the host must run.
type AgentReleaseOrder struct {
	// Version to run. An agent that runs it already does nothing; one
	// that holds it (installed, or kept from an earlier trial) switches
	// to it without a transfer.
	Version string `json:"version"`
	// Bundle is the signed release bundle for the host's OS and
	// architecture (release.Bundle, JSON); empty when the hub has none,
	// as for a revert to a release the host holds.
	Bundle []byte `json:"bundle,omitempty"`
	// SHA256 and Size of the binary, as the bundle says; the agent
	// believes the bundle's, after checking its signature.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// TrialSeconds is how long the new release has, from its start, to
	// reach the hub and pass its checks before it is rolled back.
	TrialSeconds int32 `json:"trialSeconds,omitempty"`
}

// ReleaseRequest asks for the bytes of the ordered release's binary, or
// of a hub-carried archive the host is ordered to stage, from Offset on
// (the size of what the agent already holds).
type ReleaseRequest struct {
	SHA256 string `json:"sha256"`
	Offset int64  `json:"offset"`
}

// ReleaseData starts a stream of a release binary's (or an archive's)
// bytes: Size-Offset bytes follow, then the hub closes the stream.
type ReleaseData struct {
	SHA256 string `json:"sha256"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
}

// Validate checks what an agent will check before it accepts the order:
// a hub must not send one it refuses, or the agent drops the session.
func (o *AgentReleaseOrder) Validate() error { return o.validate() }

func (o *AgentReleaseOrder) validate() error {
	switch {
	case !versionPattern.MatchString(o.Version) || len(o.Version) > 64:
		return fmt.Errorf("version %q is not vX.Y.Z", o.Version)
	case len(o.Bundle) > MaxReleaseBundleSize:
		return fmt.Errorf("a bundle of %d bytes exceeds %d", len(o.Bundle), MaxReleaseBundleSize)
	case len(o.Bundle) > 0 && (!sha256Pattern.MatchString(o.SHA256) || o.Size <= 0 || o.Size > MaxReleaseSize):
		return fmt.Errorf("a bundle needs the binary's sha256 and a size of at most %d bytes", MaxReleaseSize)
	case o.TrialSeconds < 0:
		return fmt.Errorf("trialSeconds is negative")
	}
	return nil
}

func validRange(sha string, offset, size int64) error {
	if !sha256Pattern.MatchString(sha) {
		return fmt.Errorf("sha256 %q is not 64 hex digits", sha)
	}
	if offset < 0 || size < 0 || size > MaxTransferSize || offset > max(size, MaxTransferSize) {
		return fmt.Errorf("offset %d and size %d are not a range of at most %d bytes", offset, size, MaxTransferSize)
	}
	return nil
}
