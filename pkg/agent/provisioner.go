package agent

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Result is what a finished bootstrap produced.
type Result struct {
	ProviderID         string
	NodeName           string
	CertificatesExpiry *time.Time
}

// Provisioner turns the host into a Machine and back. Everything it does
// to the host goes through its own root directory and command runner.
type Provisioner interface {
	// Provision runs an assignment's bootstrap data. progress reports the
	// step it is at ("runcmd 3/7").
	Provision(ctx context.Context, a *wire.Assignment, progress func(step string)) (Result, error)
	// Reset returns the host to clean after the claim ends. progress
	// reports the step it is at ("reset 1/2").
	Reset(ctx context.Context, claimUID types.UID, progress func(step string)) error
}

// Transcripts, files in the state directory: the whole output of the last
// bootstrap and of the last reset. A Provisioner writes them; the hub's
// host access reads them (redacted).
const (
	BootstrapTranscript = "bootstrap.log"
	ResetTranscript     = "reset.log"
)

// CertificatesReader is a Provisioner that can read the expiry of the
// host's control-plane certificates again after provisioning: they are
// renewed (kubeadm certs renew, a kubeadm upgrade) while the host serves.
type CertificatesReader interface {
	// CertificatesExpiry is the earliest expiry among them now, nil on a
	// host with none (a worker).
	CertificatesExpiry() *time.Time
}

// ErrNoProvisioner is what an agent without a provisioner reports.
var ErrNoProvisioner = errors.New("this fleet-agent build cannot run bootstrap data yet: the cloud-config provisioner is not built in")

// Unavailable is the provisioner of a build that has none: it refuses
// every assignment, loudly, so the host shows NeedsAttention with the reason.
type Unavailable struct{}

// Provision refuses.
func (Unavailable) Provision(context.Context, *wire.Assignment, func(string)) (Result, error) {
	return Result{}, ErrNoProvisioner
}

// Reset has nothing to undo.
func (Unavailable) Reset(context.Context, types.UID, func(string)) error { return nil }
