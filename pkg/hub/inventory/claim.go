package inventory

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// ClaimUIDIndex is the field index, on EdgeHosts, of spec.claimRef.uid.
const ClaimUIDIndex = "spec.claimRef.uid"

// IndexClaimUID is the indexer function for ClaimUIDIndex.
func IndexClaimUID(o client.Object) []string {
	h, ok := o.(*infrav1.EdgeHost)
	if !ok || h.Spec.ClaimRef == nil {
		return nil
	}
	return []string{string(h.Spec.ClaimRef.UID)}
}

// ClaimID is the ID under which em claims a host: ClaimIDAnnotation, else
// its uid (a machine that has not claimed yet, or claimed before the ID was
// recorded).
func ClaimID(em *infrav1.EdgeMachine) types.UID {
	if id := em.Annotations[infrav1.ClaimIDAnnotation]; id != "" {
		return types.UID(id)
	}
	return em.UID
}

// ErrNoHost means no host satisfies the request right now.
var ErrNoHost = errors.New("no Available EdgeHost matches")

// Request says what a machine needs from a host.
type Request struct {
	// Machine is the EdgeMachine that wants a host.
	Machine *infrav1.EdgeMachine
	// Selector the host's labels must match; nil matches everything.
	Selector labels.Selector
	// Zone, when set, is the failure domain the host must be in.
	Zone string
	// BootstrapDataSecretName is recorded in the claim for the agent.
	BootstrapDataSecretName string
	// Cluster is the name of the machine's Cluster; ControlPlane tells
	// whether the machine is in its control plane. Both become labels.
	Cluster      string
	ControlPlane bool
	// KubernetesVersion is the Machine's; it goes into the claim for a host
	// that reports it staged, whose agent then installs it before the
	// bootstrap. A host without it provisions with what it has.
	KubernetesVersion string
}

// MembershipLabels are the labels a host held for req carries.
func MembershipLabels(machine, cluster string, controlPlane bool) map[string]string {
	l := map[string]string{infrav1.ClaimedByLabel: machine}
	if cluster != "" {
		l[infrav1.ClusterLabel] = cluster
	}
	if controlPlane {
		l[infrav1.ControlPlaneLabel] = "true"
	}
	return l
}

// HasMembershipLabels reports whether h carries exactly the labels of
// MembershipLabels(machine, cluster, controlPlane).
func HasMembershipLabels(h *infrav1.EdgeHost, machine, cluster string, controlPlane bool) bool {
	want := MembershipLabels(machine, cluster, controlPlane)
	for _, k := range []string{infrav1.ClaimedByLabel, infrav1.ClusterLabel, infrav1.ControlPlaneLabel} {
		v, ok := h.Labels[k]
		w, wok := want[k]
		if ok != wok || v != w {
			return false
		}
	}
	return true
}

// SetMembershipLabels replaces h's membership labels.
func SetMembershipLabels(h *infrav1.EdgeHost, machine, cluster string, controlPlane bool) {
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	delete(h.Labels, infrav1.ClusterLabel)
	delete(h.Labels, infrav1.ControlPlaneLabel)
	for k, v := range MembershipLabels(machine, cluster, controlPlane) {
		h.Labels[k] = v
	}
}

// Candidates returns the claimable hosts that satisfy req, in the order a
// claimer should try them: by a hash of the machine and the host
// (rendezvous hashing). Machines racing for one pool start at different
// hosts instead of all colliding on the first one; and one machine
// reconciled by two hub replicas at once starts at the same host in both,
// even when their views of the pool differ by a host or two, so the
// second claim meets the first as a Conflict instead of taking another
// host.
func Candidates(hosts []infrav1.EdgeHost, req Request) []*infrav1.EdgeHost {
	var out []*infrav1.EdgeHost
	for i := range hosts {
		if fits(&hosts[i], req) {
			out = append(out, &hosts[i])
		}
	}
	if len(out) == 0 {
		return nil
	}
	machine := req.Machine.Namespace + "/" + req.Machine.Name
	score := make(map[*infrav1.EdgeHost]uint32, len(out))
	for _, h := range out {
		f := fnv.New32a()
		_, _ = f.Write([]byte(machine + "\x00" + h.Name))
		score[h] = f.Sum32()
	}
	sort.Slice(out, func(i, j int) bool {
		if score[out[i]] != score[out[j]] {
			return score[out[i]] < score[out[j]]
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// fits reports whether the request may be given this host now.
func fits(h *infrav1.EdgeHost, req Request) bool {
	return hostphase.IsClaimable(h) &&
		(req.Selector == nil || req.Selector.Matches(labels.Set(h.Labels))) &&
		(req.Zone == "" || Zone(h) == req.Zone)
}

// claimAttempts bounds how often Claim re-reads and retries a host whose
// every write conflicts; the first host to use them up ends the claim, so a
// pool rewritten without pause cannot hold a worker; the caller's requeue
// takes it from there.
const claimAttempts = 3

// Claim gives one of the candidates to the machine and returns it. The
// claim is exactly one successful Update carrying the resourceVersion read,
// so a host can never be given twice. A Conflict means only that the host
// changed, so it is read again from live: taken by another machine, it is
// skipped; taken by this one (another hub replica reconciling the same
// machine at the same moment), it is the claim, and moving on would give
// the machine two hosts; changed otherwise (its agent's status, a label)
// and still fitting, it is claimed on the fresh copy. Giving up on that
// host would strand the machine: a change that leaves a free host free
// wakes no waiting machine (hostChangeMattersToMachines).
func Claim(ctx context.Context, c client.Client, live client.Reader, candidates []*infrav1.EdgeHost, req Request) (*infrav1.EdgeHost, error) {
	for _, h := range candidates {
		claimed, err := claimOne(ctx, c, live, h, req)
		if err != nil {
			// A Conflict here means the host is still free after
			// claimAttempts tries: the caller requeues rather than
			// reporting "no host".
			return nil, err
		}
		if claimed != nil {
			return claimed, nil
		}
	}
	return nil, ErrNoHost
}

// claimOne claims h, re-reading it after each Conflict while it still fits.
// It returns nil, nil when the host is gone or no longer fits.
func claimOne(ctx context.Context, c client.Client, live client.Reader, h *infrav1.EdgeHost, req Request) (*infrav1.EdgeHost, error) {
	var err error
	for range claimAttempts {
		claimed := h.DeepCopy()
		claimed.Spec.ClaimRef = &infrav1.HostClaimReference{
			Name:                    req.Machine.Name,
			UID:                     ClaimID(req.Machine),
			BootstrapDataSecretName: req.BootstrapDataSecretName,
		}
		if slices.Contains(h.Status.Facts.KubernetesVersions, req.KubernetesVersion) {
			claimed.Spec.ClaimRef.KubernetesVersion = req.KubernetesVersion
		}
		SetMembershipLabels(claimed, req.Machine.Name, req.Cluster, req.ControlPlane)
		// Update, not Patch: it carries h's resourceVersion, so it fails
		// with a Conflict if the host changed since we read it.
		err = c.Update(ctx, claimed)
		switch {
		case err == nil:
			return claimed, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case !apierrors.IsConflict(err):
			return nil, fmt.Errorf("claiming EdgeHost %s: %w", h.Name, err)
		}
		fresh := &infrav1.EdgeHost{}
		if gerr := live.Get(ctx, client.ObjectKeyFromObject(h), fresh); gerr != nil {
			if apierrors.IsNotFound(gerr) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading EdgeHost %s again after a conflicting claim: %w", h.Name, gerr)
		}
		if ref := fresh.Spec.ClaimRef; ref != nil && ref.UID == ClaimID(req.Machine) {
			// This machine's claim, made by another worker or hub replica
			// reconciling it at the same moment: it holds this host, and
			// going on to the next candidate would give it two.
			return fresh, nil
		}
		if !fits(fresh, req) {
			return nil, nil
		}
		h = fresh
	}
	return nil, fmt.Errorf("claiming EdgeHost %s, still free after %d conflicting writes: %w", h.Name, claimAttempts, err)
}

// Release clears the claim a machine holds on a host. It is a no-op when the
// host is held by someone else, so a stale reconcile can never free another
// machine's host.
func Release(ctx context.Context, c client.Client, h *infrav1.EdgeHost, machineUID types.UID) error {
	// machineUID is the claim ID (ClaimID), which a restore keeps.
	if h.Spec.ClaimRef == nil || h.Spec.ClaimRef.UID != machineUID {
		return nil
	}
	released := h.DeepCopy()
	released.Spec.ClaimRef = nil
	delete(released.Labels, infrav1.ClaimedByLabel)
	delete(released.Labels, infrav1.ClusterLabel)
	delete(released.Labels, infrav1.ControlPlaneLabel)
	// The spec change makes this generation+1. The agent must acknowledge
	// that generation before the host counts as clean: it may have started
	// on the assignment without having reported it yet. (Deletion also
	// bumps the generation, so the generation alone cannot say this.)
	if released.Annotations == nil {
		released.Annotations = map[string]string{}
	}
	released.Annotations[infrav1.ReleasedAtGenerationAnnotation] = strconv.FormatInt(h.Generation+1, 10)
	released.Annotations[infrav1.ReleasedClaimAnnotation] = string(machineUID) + " " + string(h.UID)
	if err := c.Update(ctx, released); err != nil {
		return fmt.Errorf("releasing EdgeHost %s: %w", h.Name, err)
	}
	*h = *released
	return nil
}
