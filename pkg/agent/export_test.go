package agent

import (
	"context"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// What the tests of package agent_test reach inside the agent for: the
// worker and the loop, driven without a hub.

// Apply has the worker act on d.
func (a *Agent) Apply(ctx context.Context, d *wire.DesiredState) { a.apply(ctx, d) }

// InterruptIfReleased is the loop's interrupt of a released bootstrap.
func (a *Agent) InterruptIfReleased(d *wire.DesiredState) { a.interruptIfReleased(d) }

// Restore loads the state directory as Run does at start.
func (a *Agent) Restore() error { return a.restore() }

// SetAppliedGeneration sets the generation the agent has acted on.
func (a *Agent) SetAppliedGeneration(g int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.applied.Generation = g
}

// CurrentStatus is the status manager's latest status.
func (a *Agent) CurrentStatus() *wire.Status { return a.status.Current() }

// Updates is the channel the session source feeds the loop with.
func (a *Agent) Updates() chan<- session.Update { return a.updates }

// SetLiveness sets the housekeeping period and the worker's stall limit.
func (a *Agent) SetLiveness(housekeeping, workerStall time.Duration) {
	a.housekeeping, a.stallLimits.worker = housekeeping, workerStall
}

// FinishInterruptedUpgrade is what the worker does first.
func (a *Agent) FinishInterruptedUpgrade(ctx context.Context) { a.finishInterruptedUpgrade(ctx) }

// SetStage is the loop handing the hub's Stage orders to the staging room.
func (a *Agent) SetStage(orders []wire.StageOrder) { a.setStage(orders) }

// StageOrdered runs one round of the staging worker; it returns when to
// try again.
func (a *Agent) StageOrdered(ctx context.Context) time.Duration { return a.stageOrdered(ctx) }

// RefreshCertificates is the loop's daily read of the certificates' expiry.
func (a *Agent) RefreshCertificates() { a.refreshCertificates() }

// RenewIfDue is what the worker does on the loop's daily tick.
func (a *Agent) RenewIfDue(ctx context.Context) { a.renewIfDue(ctx) }

// FinishInterruptedRenewal is what the worker does first, after upgrades.
func (a *Agent) FinishInterruptedRenewal(ctx context.Context) { a.finishInterruptedRenewal(ctx) }
