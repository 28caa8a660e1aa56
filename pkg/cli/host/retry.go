package host

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// RetryOptions is `kubectl fleet host retry`.
type RetryOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name    string
	Wait    bool
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the host name and builds the client.
func (o *RetryOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and --timeout.
func (o *RetryOptions) Validate() error {
	if o.Wait && o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return validate.HostName(o.Name)
}

// Run raises the host's retry counter, which the hub turns into a new
// order to reset, and with --wait follows the host until it is Available.
func (o *RetryOptions) Run(ctx context.Context) error {
	h, err := getHost(ctx, o.conn, o.Name)
	if err != nil {
		return err
	}
	if err := o.retryable(ctx, h); err != nil {
		return err
	}
	n, _ := strconv.ParseInt(h.Annotations[infrav1.RetryResetAnnotation], 10, 64)
	n = max(n, h.Spec.ResetRetries) + 1
	// With the resourceVersion read: two operators retrying at once order
	// one reset, and the second hears of the first.
	patch := kube.MergeFromWithOptimisticLock(h.DeepCopy())
	if h.Annotations == nil {
		h.Annotations = map[string]string{}
	}
	h.Annotations[infrav1.RetryResetAnnotation] = strconv.FormatInt(n, 10)
	if err := o.conn.Client.Patch(ctx, h, patch); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("edgehost/%s changed while the retry was being ordered: look at `kubectl fleet get hosts` and run retry again if it is still NeedsAttention", o.Name)
		}
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgehost/%s reset ordered again (retry %d)\n", o.Name, n)
	if !meta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition) {
		fmt.Fprintf(o.Out, "edgehost/%s's agent is not connected%s: it resets the host when it comes back\n", o.Name, lastSeen(h))
	}
	if !o.Wait {
		return nil
	}
	return o.wait(ctx)
}

// retryable refuses hosts that have no failed reset to retry.
func (o *RetryOptions) retryable(ctx context.Context, h *infrav1.EdgeHost) error {
	switch {
	case !h.DeletionTimestamp.IsZero():
		return fmt.Errorf("edgehost/%s is being deleted: its identity is revoked, so its agent can no longer be ordered anything", o.Name)
	case h.Status.Phase != infrav1.HostNeedsAttention:
		return fmt.Errorf("edgehost/%s is %s, not NeedsAttention: there is no failed reset to retry", o.Name, h.Status.Phase)
	case h.Spec.ClaimRef != nil:
		return fmt.Errorf("edgehost/%s: the bootstrap of %s failed (%s), and a bootstrap never runs twice on a host: "+
			"delete the Machine (the host is then reset), and retry the reset if that fails", o.Name, describeClaim(ctx, o.conn, h), failure(h))
	}
	return nil
}

// wait follows the host's phase until it is Available, or the reset fails
// again.
func (o *RetryOptions) wait(ctx context.Context) error {
	left := false
	return progress.Until(ctx, o.Out, o.Timeout, "edgehost/"+o.Name+" to be reset", func(ctx context.Context) (string, bool, error) {
		h, err := getHost(ctx, o.conn, o.Name)
		if err != nil {
			return "", false, err
		}
		phase := h.Status.Phase
		switch {
		case phase != infrav1.HostNeedsAttention:
			left = true
		case left:
			return "", false, fmt.Errorf("edgehost/%s's reset failed again (%s)", o.Name, failure(h))
		default:
			// Still the phase the retry started from: nothing new to say.
			return "", false, nil
		}
		return fmt.Sprintf("edgehost/%s %s", o.Name, phase), phase == infrav1.HostAvailable, nil
	})
}
