package sessions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// push sends the desired state if it changed since the last push. It is
// computed from the informer cache, so a change costs no API read, except
// for the bootstrap data, read once per new assignment. retry is true when
// the push failed for a reason worth another try soon.
func (ss *Session) push() (retry bool) {
	select {
	case <-ss.done:
		return false
	default:
	}
	seen := ss.pendingSince.Swap(0)
	requeue := func() bool {
		// Keep the older of this push's and a newer kick's time.
		for {
			cur := ss.pendingSince.Load()
			if (cur != 0 && cur <= seen) || ss.pendingSince.CompareAndSwap(cur, seen) {
				return true
			}
		}
	}
	ctx := context.Background()
	host := &infrav1.EdgeHost{}
	if err := ss.reg.client.Get(ctx, client.ObjectKey{Namespace: ss.id.Namespace, Name: ss.id.Name}, host); err != nil {
		return requeue()
	}
	if err := identity.Trust(host, ss.Peer()); err != nil {
		if errors.Is(err, identity.ErrReplaced) {
			go ss.reg.closeIfReplaced(ss)
			return requeue()
		}
		ss.distrusted(err)
		return false
	}
	desired, err := ss.nextDesired(ctx, host)
	if err != nil {
		ss.reg.log.Error(err, "Computing desired state", "EdgeHost", ss.id.String())
		return requeue()
	}
	if desired == nil || ss.lastPushed != nil && equality.Semantic.DeepEqual(ss.lastPushed, desired) {
		return false
	}
	// Before the send: the agent may ask for the ordered release as soon
	// as the desired state reaches it.
	ss.pushedRelease.Store(desired.AgentRelease)
	ss.pushedStage.Store(&desired.Stage)
	if err := ss.send(desired); err != nil {
		ss.Close()
		return false
	}
	if seen != 0 {
		pushLatency.Observe(time.Since(time.Unix(0, seen)).Seconds())
	}
	ss.lastPushed = desired
	return false
}

// nextDesired is the host's desired state, or nil when it is what was last
// pushed.
func (ss *Session) nextDesired(ctx context.Context, host *infrav1.EdgeHost) (*wire.DesiredState, error) {
	var reach *wire.Reach
	if ss.reg.reach != nil {
		reach = ss.reg.reach.For(ctx, host)
	}
	var stage []wire.StageOrder
	if ss.reg.stage != nil {
		stage = ss.reg.stage.For(ctx, host, ss.Can)
	}
	var agentRelease *wire.AgentReleaseOrder
	if ss.reg.releases != nil && ss.Can(wire.CapabilitySelfUpdate) {
		agentRelease = ss.reg.releases.For(ctx, host)
	}
	switch {
	case ss.lastPushed != nil && sameIntent(ss.lastPushed, host) && wire.SameReach(ss.lastPushed.Reach, reach) &&
		slices.Equal(ss.lastPushed.Stage, stage) && equality.Semantic.DeepEqual(ss.lastPushed.AgentRelease, agentRelease):
		return nil, nil
	case ss.lastPushed != nil && sameIntent(ss.lastPushed, host):
		// Only the cluster's endpoint, its control plane, the stage or the
		// release orders moved: the same state with the new ones, without
		// reading the bootstrap Secret again.
		d := *ss.lastPushed
		d.Reach, d.Stage, d.AgentRelease = reach, stage, agentRelease
		return &d, nil
	}
	desired, err := ss.reg.desiredFor(ctx, host)
	if err != nil {
		return nil, err
	}
	desired.Reach, desired.Stage, desired.AgentRelease = reach, stage, agentRelease
	return desired, nil
}

// sameIntent tells, without reading the bootstrap Secret, that the host
// still wants what was last pushed (the common case: a status-only update).
func sameIntent(last *wire.DesiredState, h *infrav1.EdgeHost) bool {
	if last.Generation != h.Generation || last.HostUID != h.UID {
		return false
	}
	return last.Deprovision == wantsDeprovision(h) && (last.Assignment != nil) == (h.Spec.ClaimRef != nil)
}

// wantsDeprovision: a released host the agent has not reset yet, or whose
// reset failed. It stays true when a reset fails, so the failure itself
// sends nothing new: only a new generation (`kubectl fleet host retry`)
// orders the reset again.
func wantsDeprovision(h *infrav1.EdgeHost) bool {
	phase := hostphase.Phase(h)
	// A workload the hub never released is not its to reset.
	return h.Spec.ClaimRef == nil && !hostphase.HoldsUnknownWorkload(h) &&
		(phase == infrav1.HostDeprovisioning || phase == infrav1.HostNeedsAttention)
}

// desiredFor computes a host's full desired state. Only the host's own
// claim and the Secret it names are ever read: an agent cannot be sent
// anything else.
func (r *Registry) desiredFor(ctx context.Context, h *infrav1.EdgeHost) (*wire.DesiredState, error) {
	d := &wire.DesiredState{Generation: h.Generation, HostUID: h.UID}
	claim := h.Spec.ClaimRef
	if claim == nil {
		d.Deprovision = wantsDeprovision(h)
		return d, nil
	}
	if claim.BootstrapDataSecretName == "" {
		return d, nil
	}
	secret := &corev1.Secret{}
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: claim.BootstrapDataSecretName}, secret); err != nil {
		return nil, fmt.Errorf("reading bootstrap data Secret %s/%s: %w", h.Namespace, claim.BootstrapDataSecretName, err)
	}
	format := string(secret.Data["format"])
	if format == "" {
		format = "cloud-config"
	}
	d.Assignment = &wire.Assignment{
		ClaimUID:        claim.UID,
		MachineName:     claim.Name,
		ProviderID:      inventory.ProviderID(h),
		BootstrapFormat: format,
		BootstrapData:   secret.Data["value"],
		// Only hubs that know the field set it (older ones never order).
		KubernetesVersion:           claim.KubernetesVersion,
		CertificatesRenewBeforeDays: claim.CertificatesRenewBeforeDays,
	}
	if len(d.Assignment.BootstrapData) == 0 {
		return nil, fmt.Errorf("bootstrap data Secret %s/%s has no value", h.Namespace, claim.BootstrapDataSecretName)
	}
	return d, nil
}
