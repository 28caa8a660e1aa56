package host

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// RemoveOptions is `kubectl fleet host remove`.
type RemoveOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name    string
	Force   bool
	Wait    bool
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the host name and builds the client.
func (o *RemoveOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and --timeout.
func (o *RemoveOptions) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return validate.HostName(o.Name)
}

// Run removes the host: at once when it is clean, after its agent's reset
// when one is under way, and with --force whatever it still holds.
func (o *RemoveOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	h, err := getHost(ctx, o.conn, o.Name)
	if err != nil {
		return err
	}
	if o.Force {
		return o.force(ctx, h)
	}
	// Deleted only as read: a Machine claiming the host in between makes
	// the delete a Conflict, and the host is judged again.
	for {
		ready, err := o.removable(ctx, h)
		if err != nil {
			return err
		}
		if ready {
			err = o.conn.Client.Delete(ctx, h, kube.Preconditions{UID: &h.UID, ResourceVersion: &h.ResourceVersion})
			if err == nil || apierrors.IsNotFound(err) {
				fmt.Fprintf(o.Out, "edgehost/%s removed\n", o.Name)
				return o.waitGone(ctx, h.UID)
			}
			if !apierrors.IsConflict(err) {
				return o.conn.Explain(err)
			}
		} else if err := sleep(ctx, 2*time.Second); err != nil {
			return fmt.Errorf("timed out waiting for edgehost/%s's agent to reset it (phase %s; the host stays cordoned: "+
				"`kubectl fleet host uncordon %s` to use it again): %w", o.Name, h.Status.Phase, o.Name, err)
		}
		if h, err = getHost(ctx, o.conn, o.Name); err != nil {
			return err
		}
	}
}

// removable tells whether the host can be removed without giving anything
// up now (true), after its agent's reset (false), or not at all (error).
func (o *RemoveOptions) removable(ctx context.Context, h *infrav1.EdgeHost) (bool, error) {
	if h.Spec.ClaimRef != nil {
		return false, fmt.Errorf("edgehost/%s serves %s (phase %s): delete the Machine first, and its host is reset and "+
			"can be removed; or give the Machine up with --force (the host is not reset)", o.Name, describeClaim(ctx, o.conn, h), h.Status.Phase)
	}
	if !h.DeletionTimestamp.IsZero() {
		return true, nil
	}
	connected := meta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition)
	switch h.Status.Phase {
	case infrav1.HostNeedsAttention:
		return false, fmt.Errorf("edgehost/%s's reset failed (%s): order it again with `kubectl fleet host retry %s`, "+
			"or remove the host unreset with --force", o.Name, failure(h), o.Name)
	case infrav1.HostAvailable:
		return true, nil
	case infrav1.HostDeprovisioning:
		if !connected {
			return false, fmt.Errorf("edgehost/%s has not been reset and its agent is not connected%s: "+
				"bring the agent back, or remove the host unreset with --force", o.Name, lastSeen(h))
		}
		if err := o.cordon(ctx, h); err != nil {
			return false, err
		}
		return false, nil
	}
	return false, fmt.Errorf("edgehost/%s is %s: wait until it is Available, or use --force", o.Name, h.Status.Phase)
}

// cordon keeps a host whose agent is resetting it from being claimed the
// moment it is clean, once.
func (o *RemoveOptions) cordon(ctx context.Context, h *infrav1.EdgeHost) error {
	if h.Labels[infrav1.CordonedLabel] == "true" {
		return nil
	}
	patch := kube.MergeFrom(h.DeepCopy())
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	h.Labels[infrav1.CordonedLabel] = "true"
	if err := o.conn.Client.Patch(ctx, h, patch); err != nil {
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgehost/%s cordoned; waiting for its agent to reset it\n", o.Name)
	return nil
}

// force marks the host for a forced removal and deletes it; the hub gives
// up its claim and lets it go. It says what was given up.
func (o *RemoveOptions) force(ctx context.Context, h *infrav1.EdgeHost) error {
	var lost []string
	if h.Spec.ClaimRef != nil {
		lost = append(lost, describeClaim(ctx, o.conn, h)+" lost its host")
	}
	if h.Status.Phase != infrav1.HostAvailable {
		lost = append(lost, "the host was not reset (phase "+string(h.Status.Phase)+"): wipe it before it serves again")
	}
	patch := kube.MergeFrom(h.DeepCopy())
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[infrav1.RemoveAnnotation] = infrav1.RemoveForce
	if user := o.whoAmI(ctx); user != "" {
		h.Annotations[infrav1.RemovedByAnnotation] = user
	}
	if err := o.conn.Client.Patch(ctx, h, patch); err != nil {
		return o.conn.Explain(err)
	}
	if err := o.conn.Client.Delete(ctx, h); err != nil && !apierrors.IsNotFound(err) {
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgehost/%s removed by force\n", o.Name)
	for _, l := range lost {
		fmt.Fprintf(o.Out, "  given up: %s\n", l)
	}
	return o.waitGone(ctx, h.UID)
}

// whoAmI names the user for the hub's Events, or "" when the API server
// cannot say (the removal goes on regardless).
func (o *RemoveOptions) whoAmI(ctx context.Context) string {
	review := &authenticationv1.SelfSubjectReview{}
	if err := o.conn.Client.Create(ctx, review); err != nil {
		return ""
	}
	return review.Status.UserInfo.Username
}

// waitGone waits until the EdgeHost of that uid is gone. A host of the same
// name with another uid is the machine enrolling again: its agent still
// runs and holds a token that is still valid.
func (o *RemoveOptions) waitGone(ctx context.Context, uid types.UID) error {
	if !o.Wait {
		return nil
	}
	what := fmt.Sprintf("edgehost/%s to go (`kubectl describe edgehost %s` says why it stays)", o.Name, o.Name)
	return progress.Until(ctx, o.Out, o.Timeout, what, func(ctx context.Context) (string, bool, error) {
		h := &infrav1.EdgeHost{}
		err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.conn.Namespace, Name: o.Name}, h)
		switch {
		case apierrors.IsNotFound(err):
			return "", true, nil
		case err == nil && h.UID != uid:
			return fmt.Sprintf("edgehost/%s enrolled again as a new host: its agent still runs with a valid token "+
				"(stop the agent, or revoke the token with `kubectl fleet token revoke`)", o.Name), true, nil
		}
		return "", false, nil
	})
}

func getHost(ctx context.Context, conn *kube.Connection, name string) (*infrav1.EdgeHost, error) {
	h := &infrav1.EdgeHost{}
	if err := conn.Client.Get(ctx, kube.ObjectKey{Namespace: conn.Namespace, Name: name}, h); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("host %q not found in namespace %s (see `kubectl fleet get hosts`)", name, conn.Namespace)
		}
		return nil, conn.Explain(err)
	}
	return h, nil
}

// describeClaim names the Machine a claimed host serves, as
// "Machine NAMESPACE/NAME", or its EdgeMachine when it has no Machine.
func describeClaim(ctx context.Context, conn *kube.Connection, h *infrav1.EdgeHost) string {
	claim := h.Spec.ClaimRef
	em := &infrav1.EdgeMachine{}
	if err := conn.Client.Get(ctx, kube.ObjectKey{Namespace: h.Namespace, Name: claim.Name}, em); err == nil {
		for _, ref := range em.OwnerReferences {
			if ref.Kind == "Machine" {
				return fmt.Sprintf("Machine %s/%s", h.Namespace, ref.Name)
			}
		}
	}
	return fmt.Sprintf("EdgeMachine %s/%s", h.Namespace, claim.Name)
}

// failure is what the agent said of its last failure.
func failure(h *infrav1.EdgeHost) string {
	if p := h.Status.Provisioning; p != nil && p.Message != "" {
		return fmt.Sprintf("%s at %q: %s", p.State, p.Step, firstLine(p.Message))
	}
	return "no message from the agent"
}

func lastSeen(h *infrav1.EdgeHost) string {
	if h.Status.LastSeenTime == nil {
		return ""
	}
	return " (last seen " + h.Status.LastSeenTime.UTC().Format(time.RFC3339) + ")"
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i] + " …"
		}
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
