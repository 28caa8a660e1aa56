package agent

import (
	"context"
	"errors"
	"sync"
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
	// Reset returns the host to clean after the claim ends.
	Reset(ctx context.Context, claimUID types.UID) error
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
func (Unavailable) Reset(context.Context, types.UID) error { return nil }

// Recorder is a provisioner that only records what it was told and
// succeeds: the worker under test, and the load driver's provisioner.
type Recorder struct {
	// NodeName to report; defaults to the machine name.
	NodeName string

	mu         sync.Mutex
	provisions []wire.Assignment
	resets     []types.UID
}

// Provision records the assignment.
func (r *Recorder) Provision(_ context.Context, a *wire.Assignment, progress func(string)) (Result, error) {
	progress("recording assignment")
	r.mu.Lock()
	r.provisions = append(r.provisions, *a)
	r.mu.Unlock()
	node := r.NodeName
	if node == "" {
		node = a.MachineName
	}
	return Result{ProviderID: a.ProviderID, NodeName: node}, nil
}

// Reset records the reset.
func (r *Recorder) Reset(_ context.Context, uid types.UID) error {
	r.mu.Lock()
	r.resets = append(r.resets, uid)
	r.mu.Unlock()
	return nil
}

// Provisions returns the assignments run so far.
func (r *Recorder) Provisions() []wire.Assignment {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Assignment(nil), r.provisions...)
}

// Resets returns the claims reset so far.
func (r *Recorder) Resets() []types.UID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]types.UID(nil), r.resets...)
}
