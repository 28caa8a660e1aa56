package agenttest

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

var _ agent.Provisioner = (*Recorder)(nil)

// Recorder is a provisioner that only records what it was told and
// succeeds: the provisioner of agents under test, and of the load
// driver's simulated agents.
type Recorder struct {
	// NodeName to report; defaults to the machine name.
	NodeName string

	mu         sync.Mutex
	provisions []wire.Assignment
	resets     []types.UID
}

// Provision records the assignment.
func (r *Recorder) Provision(_ context.Context, a *wire.Assignment, progress func(string)) (agent.Result, error) {
	progress("recording assignment")
	r.mu.Lock()
	r.provisions = append(r.provisions, *a)
	r.mu.Unlock()
	node := r.NodeName
	if node == "" {
		node = a.MachineName
	}
	return agent.Result{ProviderID: a.ProviderID, NodeName: node}, nil
}

// Reset records the reset.
func (r *Recorder) Reset(_ context.Context, uid types.UID, _ func(string)) error {
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
