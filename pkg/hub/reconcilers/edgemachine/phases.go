package edgemachine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostphase"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

// Bootstrap data formats CABPK writes into the secret's "format" key.
const (
	formatCloudConfig = "cloud-config"
	formatIgnition    = "ignition"
)

// setStep sets a condition and, when its status or reason changed, records
// an event, so `kubectl describe` shows every step a machine took.
func (r *Reconciler) setStep(em *infrav1.EdgeMachine, related client.Object, c metav1.Condition) {
	// Get returns a pointer into the slice that Set rewrites: keep a copy.
	var oldStatus metav1.ConditionStatus
	var oldReason string
	if old := conditions.Get(em, c.Type); old != nil {
		oldStatus, oldReason = old.Status, old.Reason
	}
	conditions.Set(em, c)
	if oldStatus == c.Status && oldReason == c.Reason {
		return
	}
	eventType := corev1.EventTypeNormal
	if c.Reason == infrav1.BootstrapDataInvalidReason || c.Reason == infrav1.InvalidHostSelectorReason ||
		c.Reason == infrav1.ProvisioningFailedReason || c.Reason == infrav1.HostLostReason ||
		c.Reason == infrav1.AgentDisconnectedReason || c.Reason == infrav1.UpgradeFailedReason ||
		c.Reason == infrav1.VersionNotStagedReason {
		eventType = corev1.EventTypeWarning
	}
	note := c.Message
	if note == "" {
		note = c.Type + " is " + string(c.Status)
	}
	r.Recorder.Eventf(em, related, eventType, c.Reason, c.Type, "%s", note)
}

// reconcileBootstrapData waits for the Cluster's infrastructure and the
// Machine's bootstrap secret, and refuses secrets an agent cannot run.
func (r *Reconciler) reconcileBootstrapData(ctx context.Context, s *scope) (bool, error) {
	em := s.edgeMachine
	if ptr.Deref(em.Status.Initialization.Provisioned, false) {
		// Already running: the bootstrap data has done its job.
		return false, nil
	}
	if !ptr.Deref(s.cluster.Status.Initialization.InfrastructureProvisioned, false) {
		r.setStep(em, s.cluster, metav1.Condition{
			Type: infrav1.BootstrapDataReadyCondition, Status: metav1.ConditionFalse,
			Reason:  infrav1.WaitingForClusterInfrastructureReason,
			Message: fmt.Sprintf("Waiting for Cluster %s status.initialization.infrastructureProvisioned to be true", s.cluster.Name),
		})
		return true, nil
	}
	name := s.machine.Spec.Bootstrap.DataSecretName
	if name == nil || *name == "" {
		r.setStep(em, s.machine, metav1.Condition{
			Type: infrav1.BootstrapDataReadyCondition, Status: metav1.ConditionFalse,
			Reason:  infrav1.WaitingForBootstrapDataReason,
			Message: fmt.Sprintf("Waiting for Machine %s spec.bootstrap.dataSecretName", s.machine.Name),
		})
		return true, nil
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: em.Namespace, Name: *name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			r.setStep(em, s.machine, metav1.Condition{
				Type: infrav1.BootstrapDataReadyCondition, Status: metav1.ConditionFalse,
				Reason:  infrav1.WaitingForBootstrapDataReason,
				Message: fmt.Sprintf("Waiting for bootstrap data Secret %s to exist", *name),
			})
			return true, nil
		}
		return true, fmt.Errorf("reading bootstrap data Secret %s: %w", *name, err)
	}
	if msg := validateBootstrapSecret(secret); msg != "" {
		r.setStep(em, secret, metav1.Condition{
			Type: infrav1.BootstrapDataReadyCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.BootstrapDataInvalidReason, Message: msg,
		})
		return true, nil
	}
	r.setStep(em, secret, metav1.Condition{
		Type: infrav1.BootstrapDataReadyCondition, Status: metav1.ConditionTrue,
		Reason: infrav1.BootstrapDataAvailableReason,
	})
	return false, nil
}

// validateBootstrapSecret returns why an agent could not run the secret's
// data, or "".
func validateBootstrapSecret(secret *corev1.Secret) string {
	value, ok := secret.Data["value"]
	if !ok || len(value) == 0 {
		return fmt.Sprintf("Bootstrap data Secret %s has no data under key \"value\"", secret.Name)
	}
	switch format := string(secret.Data["format"]); format {
	case "", formatCloudConfig:
		return ""
	case formatIgnition:
		return fmt.Sprintf("Bootstrap data Secret %s is in ignition format; fleet agents run cloud-config: configure the bootstrap provider for cloud-config", secret.Name)
	default:
		return fmt.Sprintf("Bootstrap data Secret %s has unknown format %q; fleet agents run cloud-config", secret.Name, format)
	}
}

// reconcileHostClaim makes sure the machine holds exactly one host.
func (r *Reconciler) reconcileHostClaim(ctx context.Context, s *scope) (bool, error) {
	em := s.edgeMachine
	host, err := r.heldHost(ctx, em)
	if errors.Is(err, errDuplicateClaim) {
		return true, nil // the condition says which hosts
	}
	if err != nil {
		return true, err
	}
	secretName := ""
	if s.machine.Spec.Bootstrap.DataSecretName != nil {
		secretName = *s.machine.Spec.Bootstrap.DataSecretName
	}
	if host != nil {
		return r.keepHeldHost(ctx, s, host, secretName)
	}
	// No host, no agent to speak of.
	conditions.Delete(em, infrav1.HostAgentConnectedCondition)
	if em.Spec.ProviderID != "" {
		// The machine ran on a host (its node has this providerID), and
		// holds none now: a hub restored from a backup, or a claim lost.
		// Never claim another: the Machine's node lives there.
		return r.recoverHost(ctx, s, secretName)
	}
	if em.Status.HostRef != "" && ptr.Deref(em.Status.Initialization.Provisioned, false) {
		// We had a host and lost it (deleted by force, or claim cleared by
		// hand). Never silently grab another: the Machine's node lived there.
		r.setStep(em, nil, metav1.Condition{
			Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse,
			Reason:  infrav1.HostLostReason,
			Message: fmt.Sprintf("EdgeHost %s no longer belongs to this machine; delete the Machine to replace it", em.Status.HostRef),
		})
		return true, nil
	}
	req, ok := r.claimRequest(s, secretName)
	if !ok {
		return true, nil
	}
	return r.claimHost(ctx, s, req)
}

// keepHeldHost records the host the machine already holds, and the
// bootstrap data and membership labels on it (hosts claimed before those
// labels existed get them here).
func (r *Reconciler) keepHeldHost(ctx context.Context, s *scope, host *infrav1.EdgeHost, secretName string) (bool, error) {
	em := s.edgeMachine
	controlPlane := util.IsControlPlaneMachine(s.machine)
	s.host = host
	em.Status.HostRef = host.Name
	recordClaimID(em, host.Spec.ClaimRef.UID)
	if (host.Spec.ClaimRef.BootstrapDataSecretName != secretName && secretName != "") ||
		!inventory.HasMembershipLabels(host, em.Name, s.cluster.Name, controlPlane) {
		updated := host.DeepCopy()
		if secretName != "" {
			updated.Spec.ClaimRef.BootstrapDataSecretName = secretName
		}
		inventory.SetMembershipLabels(updated, em.Name, s.cluster.Name, controlPlane)
		if err := r.Client.Update(ctx, updated); err != nil {
			return true, fmt.Errorf("recording bootstrap data and membership on EdgeHost %s: %w", host.Name, err)
		}
		s.host = updated
	}
	r.setClaimed(em, host)
	return false, nil
}

// recordClaimID keeps the ID of em's claim in its metadata, where a backup
// finds it: a restored EdgeMachine has a new uid, and the host's claim and
// its agent's workload are known by this ID.
func recordClaimID(em *infrav1.EdgeMachine, id types.UID) {
	if em.Annotations[infrav1.ClaimIDAnnotation] == string(id) {
		return
	}
	if em.Annotations == nil {
		em.Annotations = map[string]string{}
	}
	em.Annotations[infrav1.ClaimIDAnnotation] = string(id)
}

// recoverHost finds the host a machine with a providerID ran on and holds
// no longer. A restored EdgeMachine (new uid, claim ID kept or not yet
// recorded) whose host names it in its claim adopts that claim; anything
// else is reported, and no host is claimed or reset for it.
func (r *Reconciler) recoverHost(ctx context.Context, s *scope, secretName string) (bool, error) {
	em := s.edgeMachine
	name := inventory.HostOfProviderID(em.Namespace, em.Spec.ProviderID)
	host := &infrav1.EdgeHost{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: em.Namespace, Name: name}, host)
	switch {
	case apierrors.IsNotFound(err) && name == em.Status.HostRef && ptr.Deref(em.Status.Initialization.Provisioned, false):
		// This hub provisioned it there (a restore keeps no status): the
		// host was removed, by force since it held the claim.
		r.setStep(em, nil, metav1.Condition{
			Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: infrav1.HostLostReason,
			Message: fmt.Sprintf("EdgeHost %s, which ran this machine, no longer exists; no other host is claimed: "+
				"delete the Machine to replace it (or restore the EdgeHost)", name),
		})
		return true, nil
	case name == "" || apierrors.IsNotFound(err):
		r.setStep(em, nil, metav1.Condition{
			Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: infrav1.HostNotFoundReason,
			Message: fmt.Sprintf("EdgeHost %q of spec.providerID %s does not exist: if the hub was restored from a backup, "+
				"restore that EdgeHost too (its agent keeps the node running and waits); no other host is claimed", name, em.Spec.ProviderID),
		})
		return true, nil
	case err != nil:
		return true, fmt.Errorf("reading EdgeHost %s of spec.providerID: %w", name, err)
	}
	claim := host.Spec.ClaimRef
	if claim == nil || claim.Name != em.Name || em.Annotations[infrav1.ClaimIDAnnotation] != "" {
		holder, reason := "nothing", infrav1.HostLostReason
		if claim != nil {
			holder = fmt.Sprintf("EdgeMachine %s (claim %s)", claim.Name, claim.UID)
		}
		if claim != nil && claim.Name != em.Name {
			reason = infrav1.DuplicateClaimReason // two machines name one host
		}
		r.setStep(em, host, metav1.Condition{
			Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: reason,
			Message: fmt.Sprintf("EdgeHost %s of spec.providerID is held by %s, not by this machine (claim %s): "+
				"if two machines name one host after a restore, delete the copy; no host is reset or claimed for this one",
				host.Name, holder, inventory.ClaimID(em)),
		})
		return true, nil
	}
	// Restored: the host's claim names this machine, under the ID of its
	// uid before the restore. Adopt it; the agent knows the claim by it.
	recordClaimID(em, claim.UID)
	r.Recorder.Eventf(em, host, corev1.EventTypeNormal, "ClaimAdopted", "Restore",
		"Adopted the claim %s on EdgeHost %s (this EdgeMachine was re-created, e.g. restored from a backup)", claim.UID, host.Name)
	return r.keepHeldHost(ctx, s, host, secretName)
}

// claimRequest is what a host must be for this machine; false (with the
// reason set) when the machine's selector is invalid.
func (r *Reconciler) claimRequest(s *scope, secretName string) (inventory.Request, bool) {
	em := s.edgeMachine
	var selector labels.Selector
	if em.Spec.HostSelector != nil {
		var err error
		selector, err = metav1.LabelSelectorAsSelector(em.Spec.HostSelector)
		if err != nil {
			r.setStep(em, nil, metav1.Condition{
				Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse,
				Reason:  infrav1.InvalidHostSelectorReason,
				Message: fmt.Sprintf("spec.hostSelector is invalid: %v", err),
			})
			return inventory.Request{}, false
		}
	}
	return inventory.Request{
		Machine:                 em,
		Selector:                selector,
		Zone:                    s.machine.Spec.FailureDomain,
		BootstrapDataSecretName: secretName,
		Cluster:                 s.cluster.Name,
		ControlPlane:            util.IsControlPlaneMachine(s.machine),
		KubernetesVersion:       s.machine.Spec.Version,
	}, true
}

// waitForHost says the machine waits for a host that req fits.
func (r *Reconciler) waitForHost(em *infrav1.EdgeMachine, hosts []infrav1.EdgeHost, req inventory.Request) {
	r.setStep(em, nil, metav1.Condition{
		Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse,
		Reason:  infrav1.WaitingForHostReason,
		Message: noHostMessage(hosts, req, em.Spec.HostSelector),
	})
}

// claimHost claims a free host that fits req.
func (r *Reconciler) claimHost(ctx context.Context, s *scope, req inventory.Request) (bool, error) {
	em := s.edgeMachine
	// The claim ID goes with the claim (and in the same patch as the
	// status that says which host the machine holds).
	recordClaimID(em, inventory.ClaimID(em))
	// Waiting machines are woken by every host event that can change
	// whether a host is free (hostChangeMattersToMachines), so the common
	// "still nothing free" answer comes from the cache alone.
	cached := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, cached, client.InNamespace(em.Namespace)); err != nil {
		return true, fmt.Errorf("listing EdgeHosts: %w", err)
	}
	if len(inventory.Candidates(cached.Items, req)) == 0 {
		r.waitForHost(em, cached.Items, req)
		return true, nil
	}
	// About to claim: read the hosts live. The cache may lag behind a claim
	// this machine made a moment ago (whose status patch then failed), and
	// claiming from it could hand this machine a second host. The claim
	// itself is safe either way: it is an Update with resourceVersion.
	hosts := &infrav1.EdgeHostList{}
	if err := r.APIReader.List(ctx, hosts, client.InNamespace(em.Namespace)); err != nil {
		return true, fmt.Errorf("listing EdgeHosts: %w", err)
	}
	if held, err := r.keepOneHost(ctx, em, hosts.Items); err != nil || held != nil {
		if err != nil {
			return true, err
		}
		s.host = held
		em.Status.HostRef = s.host.Name
		r.setClaimed(em, s.host)
		return false, nil
	}
	claimed, err := inventory.Claim(ctx, r.Client, r.APIReader, inventory.Candidates(hosts.Items, req), req)
	if errors.Is(err, inventory.ErrNoHost) {
		r.waitForHost(em, hosts.Items, req)
		return true, nil
	}
	if err != nil {
		return true, err
	}
	s.host = claimed
	em.Status.HostRef = claimed.Name
	r.setClaimed(em, claimed)
	ctrl.LoggerFrom(ctx).Info("Claimed EdgeHost", "EdgeHost", claimed.Name)
	return false, nil
}

func (r *Reconciler) setClaimed(em *infrav1.EdgeMachine, host *infrav1.EdgeHost) {
	if zone := inventory.Zone(host); zone != "" {
		em.Status.FailureDomain = zone
	}
	r.setStep(em, host, metav1.Condition{
		Type: infrav1.HostClaimedCondition, Status: metav1.ConditionTrue,
		Reason: infrav1.HostClaimedReason, Message: fmt.Sprintf("Holding EdgeHost %s", host.Name),
	})
}

// noHostMessage explains, deterministically, why no host could be claimed.
func noHostMessage(hosts []infrav1.EdgeHost, req inventory.Request, sel *metav1.LabelSelector) string {
	matching, available := 0, 0
	for i := range hosts {
		h := &hosts[i]
		if req.Selector != nil && !req.Selector.Matches(labels.Set(h.Labels)) {
			continue
		}
		if req.Zone != "" && inventory.Zone(h) != req.Zone {
			continue
		}
		matching++
		if hostphase.IsClaimable(h) {
			available++
		}
	}
	var b strings.Builder
	b.WriteString("Waiting for an Available EdgeHost")
	if sel != nil {
		b.WriteString(" matching " + metav1.FormatLabelSelector(sel))
	}
	if req.Zone != "" {
		b.WriteString(" in zone " + req.Zone)
	}
	fmt.Fprintf(&b, ": %d of %d hosts in the namespace match, %d of them available", matching, len(hosts), available)
	return b.String()
}

// reconcileHostStatus turns the agent's report into the contract fields.
func (r *Reconciler) reconcileHostStatus(_ context.Context, s *scope) (bool, error) {
	em, host := s.edgeMachine, s.host
	em.Status.Interruptible = inventory.IsInterruptible(host)
	p := host.Status.Provisioning
	switch {
	case p != nil && p.ClaimUID != inventory.ClaimID(em) && p.State != infrav1.ProvisioningResetting:
		r.setStep(em, host, metav1.Condition{
			Type: infrav1.HostProvisionedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.HostHoldsOtherWorkloadReason,
			Message: fmt.Sprintf("The agent on EdgeHost %s still runs the workload of claim %s (%s), which it resets only on an "+
				"explicit order: release that claim, or delete this Machine to take another host", host.Name, p.ClaimUID, p.State),
		})
		return true, nil
	case p == nil || p.ClaimUID != inventory.ClaimID(em):
		r.setStep(em, host, metav1.Condition{
			Type: infrav1.HostProvisionedCondition, Status: metav1.ConditionFalse,
			Reason:  infrav1.WaitingForAgentReason,
			Message: fmt.Sprintf("Waiting for the agent on EdgeHost %s to start the bootstrap", host.Name),
		})
		return true, nil
	case p.State == infrav1.ProvisioningFailed:
		msg := fmt.Sprintf("Agent on EdgeHost %s failed the bootstrap", host.Name)
		if p.Step != "" {
			msg += " at " + p.Step
		}
		if p.Message != "" {
			msg += ": " + p.Message
		}
		r.setStep(em, host, metav1.Condition{
			Type: infrav1.HostProvisionedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.ProvisioningFailedReason, Message: msg,
		})
		return true, nil
	case p.State != infrav1.ProvisioningSucceeded || host.Status.ProviderID == "":
		msg := fmt.Sprintf("Agent on EdgeHost %s is running the bootstrap", host.Name)
		if p.Step != "" {
			msg += " (" + p.Step + ")"
		}
		r.setStep(em, host, metav1.Condition{
			Type: infrav1.HostProvisionedCondition, Status: metav1.ConditionFalse,
			Reason: infrav1.ProvisioningReason, Message: msg,
		})
		return true, nil
	}

	if em.Spec.ProviderID == "" {
		em.Spec.ProviderID = host.Status.ProviderID
	}
	em.Status.Addresses = append(infrav1.MachineAddresses(nil), host.Status.Addresses...)
	em.Status.NodeName = host.Status.NodeName
	em.Status.CertificatesExpiryDate = host.Status.CertificatesExpiryDate.DeepCopy()
	em.Status.Initialization.Provisioned = ptr.To(true)
	r.setStep(em, host, metav1.Condition{
		Type: infrav1.HostProvisionedCondition, Status: metav1.ConditionTrue,
		Reason: infrav1.ProvisionedReason, Message: fmt.Sprintf("EdgeHost %s is provisioned", host.Name),
	})
	return false, nil
}

// reconcileCertificateExpiry feeds Cluster API's certificate-expiry
// annotation for control-plane machines; core turns it into
// Machine.status.certificatesExpiryDate.
func (r *Reconciler) reconcileCertificateExpiry(ctx context.Context, s *scope) (bool, error) {
	expiry := s.edgeMachine.Status.CertificatesExpiryDate
	if !util.IsControlPlaneMachine(s.machine) || expiry == nil {
		return false, nil
	}
	value := expiry.UTC().Format(time.RFC3339)
	if s.machine.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation] == value {
		return false, nil
	}
	patched := s.machine.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[clusterv1.MachineCertificatesExpiryDateAnnotation] = value
	if err := r.Client.Patch(ctx, patched, client.MergeFrom(s.machine)); err != nil {
		return true, fmt.Errorf("annotating Machine %s with certificate expiry: %w", s.machine.Name, err)
	}
	return false, nil
}

// reconcileCertificatesRenewal passes a control-plane machine's renewal
// window to its host's claim, which the agent receives as a standing
// order to renew the certificates in place.
func (r *Reconciler) reconcileCertificatesRenewal(ctx context.Context, s *scope) (bool, error) {
	host, want := s.host, s.edgeMachine.Spec.CertificatesRenewBeforeDays
	if !util.IsControlPlaneMachine(s.machine) {
		want = 0
	}
	if host == nil || host.Spec.ClaimRef == nil {
		return false, nil
	}
	if want > 0 {
		// Each host renews on its own, restarting its etcd member: with
		// several at once etcd would lose its quorum.
		machines := &clusterv1.MachineList{}
		if err := r.Client.List(ctx, machines, client.InNamespace(s.machine.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: s.cluster.Name}, client.HasLabels{clusterv1.MachineControlPlaneLabel}); err != nil {
			return true, fmt.Errorf("listing the control-plane Machines of cluster %s: %w", s.cluster.Name, err)
		}
		if n := len(machines.Items); n > 1 {
			r.Recorder.Eventf(s.edgeMachine, host, "Warning", "CertificatesRenewalRefused", "RenewCertificates",
				"spec.certificatesRenewBeforeDays is ignored: cluster %s has %d control-plane machines, which would restart at once; "+
					"a KubeadmControlPlane renews them by replacing one at a time", s.cluster.Name, n)
			want = 0
		}
	}
	if host.Spec.ClaimRef.CertificatesRenewBeforeDays == want {
		return false, nil
	}
	updated := host.DeepCopy()
	updated.Spec.ClaimRef.CertificatesRenewBeforeDays = want
	if err := r.Client.Update(ctx, updated); err != nil {
		return true, fmt.Errorf("ordering EdgeHost %s to renew its certificates %d days before they expire: %w", host.Name, want, err)
	}
	s.host = updated
	return false, nil
}

// heldHost returns the host this machine holds, or nil.
func (r *Reconciler) heldHost(ctx context.Context, em *infrav1.EdgeMachine) (*infrav1.EdgeHost, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(em.Namespace),
		client.MatchingFields{inventory.ClaimUIDIndex: string(inventory.ClaimID(em))}); err != nil {
		return nil, fmt.Errorf("listing EdgeHosts held by %s: %w", em.Name, err)
	}
	return r.keepOneHost(ctx, em, hosts.Items)
}

// keepOneHost returns the one host among hosts that em holds, releasing
// any others. A machine can end up holding two: a claim whose Update timed
// out on the client but was still applied by the API server after the
// next reconcile had read the host as free and claimed another. Level-
// triggered: whatever the history, one host stays — the one the machine
// reports, else the one furthest along — and the rest go back to the pool.
// Two hosts that may both run the machine's workload (a restore that
// duplicated an EdgeHost, or hosts whose agents have not reported since a
// restore) are a conflict no release may settle, for it would reset a host:
// the machine says so (DuplicateClaim) and waits for an operator.
func (r *Reconciler) keepOneHost(ctx context.Context, em *infrav1.EdgeMachine, hosts []infrav1.EdgeHost) (*infrav1.EdgeHost, error) {
	id := inventory.ClaimID(em)
	var held []*infrav1.EdgeHost
	for i := range hosts {
		if c := hosts[i].Spec.ClaimRef; c != nil && c.UID == id && c.Name == em.Name {
			held = append(held, &hosts[i])
		}
	}
	if len(held) <= 1 {
		if len(held) == 1 {
			return held[0], nil
		}
		return nil, nil
	}
	if em.Spec.ProviderID != "" {
		// A claim applied late happens while a machine looks for a host,
		// never once it runs on one: this is a duplicate (a restore).
		names := make([]string, 0, len(held))
		for _, h := range held {
			names = append(names, h.Name)
		}
		r.setStep(em, nil, metav1.Condition{
			Type: infrav1.HostClaimedCondition, Status: metav1.ConditionFalse, Reason: infrav1.DuplicateClaimReason,
			Message: fmt.Sprintf("EdgeHosts %s all hold the claim %s of this running machine (spec.providerID %s); a restore that "+
				"duplicated an EdgeHost? None is released or reset: delete the EdgeHost that is not this machine's",
				strings.Join(names, ", "), id, em.Spec.ProviderID),
		})
		return nil, errDuplicateClaim
	}
	keep := held[0]
	for _, h := range held {
		if h.Name == em.Status.HostRef {
			keep = h
			break
		}
		if p := h.Status.Provisioning; p != nil && p.ClaimUID == id && keep.Status.Provisioning == nil {
			keep = h
		}
	}
	for _, h := range held {
		if h == keep {
			continue
		}
		if err := inventory.Release(ctx, r.Client, h, id); err != nil {
			return nil, fmt.Errorf("releasing EdgeHost %s, a second host of %s: %w", h.Name, em.Name, err)
		}
		r.Recorder.Eventf(em, nil, corev1.EventTypeWarning, "ReleasedExtraHost", "Release",
			"EdgeMachine held EdgeHost %s besides %s (a claim applied late); released it", h.Name, keep.Name)
		ctrl.LoggerFrom(ctx).Info("Released a second host of this machine", "EdgeHost", h.Name, "kept", keep.Name)
	}
	return keep, nil
}

// reconcileHostAgent mirrors the held host's AgentConnected into
// HostAgentConnected, which Ready summarises. The hub's own clock and grace
// decide AgentConnected; the message carries the time of the host's
// transition, so a host's lastSeenTime refreshes never change it and cost
// no write here.
func (r *Reconciler) reconcileHostAgent(_ context.Context, s *scope) (bool, error) {
	em, host := s.edgeMachine, s.host
	c := metav1.Condition{Type: infrav1.HostAgentConnectedCondition, Status: metav1.ConditionUnknown,
		Reason:  infrav1.AgentConnectivityUnknownReason,
		Message: fmt.Sprintf("The hub has no word on the agent of EdgeHost %s", host.Name)}
	if hc := conditions.Get(host, infrav1.AgentConnectedCondition); hc != nil {
		since := hc.LastTransitionTime.UTC().Format(time.RFC3339)
		switch hc.Status {
		case metav1.ConditionTrue:
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, infrav1.AgentConnectedReason, ""
		case metav1.ConditionFalse:
			c.Status, c.Reason = metav1.ConditionFalse, infrav1.AgentDisconnectedReason
			c.Message = fmt.Sprintf("The agent of EdgeHost %s has been disconnected since %s", host.Name, since)
		default:
			c.Message = fmt.Sprintf("The hub lost track of the agent of EdgeHost %s at %s: %s", host.Name, since, hc.Message)
		}
	}
	r.setStep(em, host, c)
	return false, nil
}

// errDuplicateClaim stops a reconcile that found a claim on two hosts that
// may both run it; the condition says which.
var errDuplicateClaim = errors.New("the machine's claim is held by more than one EdgeHost that may run it")

// releaseHeld releases every host that holds em's claim (a deleted machine
// lets go of all, duplicates included) and returns the one it released, if
// one.
func (r *Reconciler) releaseHeld(ctx context.Context, em *infrav1.EdgeMachine) (*infrav1.EdgeHost, error) {
	hosts := &infrav1.EdgeHostList{}
	if err := r.Client.List(ctx, hosts, client.InNamespace(em.Namespace),
		client.MatchingFields{inventory.ClaimUIDIndex: string(inventory.ClaimID(em))}); err != nil {
		return nil, fmt.Errorf("listing EdgeHosts held by %s: %w", em.Name, err)
	}
	var released *infrav1.EdgeHost
	for i := range hosts.Items {
		h := &hosts.Items[i]
		if c := h.Spec.ClaimRef; c == nil || c.Name != em.Name {
			continue
		}
		if err := inventory.Release(ctx, r.Client, h, inventory.ClaimID(em)); err != nil {
			return nil, err
		}
		released = h
	}
	return released, nil
}
