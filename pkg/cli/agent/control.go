package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/util/retry"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Action is what `kubectl fleet agent` does to a roll-out.
type Action string

// Actions on a roll-out.
const (
	Approve Action = "approve"
	Pause   Action = "pause"
	Resume  Action = "resume"
	Abort   Action = "abort"
)

// ControlOptions is `kubectl fleet agent approve|pause|resume|abort`.
type ControlOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Action  Action
	Name    string
	Wait    bool
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the roll-out's name and builds the client.
func (o *ControlOptions) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name.
func (o *ControlOptions) Validate() error {
	if o.Wait && o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return validate.RolloutName(o.Name)
}

// Run changes the roll-out's spec, guarded by the generation it read: the
// controller's status writes never refuse the command, while an operator's
// change meanwhile makes it read the roll-out again and decide anew.
func (o *ControlOptions) Run(ctx context.Context) error {
	var done string
	err := retry.OnError(retry.DefaultRetry, func(err error) bool { return errors.Is(err, errStale) }, func() error {
		var err error
		done, err = o.change(ctx)
		return err
	})
	if errors.Is(err, errStale) {
		return fmt.Errorf("edgeagentrollout/%s keeps being changed by someone else: run the command again", o.Name)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "edgeagentrollout/%s %s\n", o.Name, done)
	if o.Action == Abort && o.Wait {
		return progress.Until(ctx, o.Out, o.Timeout, "edgeagentrollout/"+o.Name+" to move its hosts back", Watch(o.conn.Client, o.conn.Namespace, o.Name, infrav1.AgentRolloutAborted))
	}
	return nil
}

var errStale = errors.New("the roll-out's spec changed since it was read")

// change reads the roll-out, refuses what does not apply and patches the
// spec; it returns what was done, or errStale when the spec changed
// between the read and the patch.
func (o *ControlOptions) change(ctx context.Context) (string, error) {
	c, ns := o.conn.Client, o.conn.Namespace
	ro := &infrav1.EdgeAgentRollout{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("edgeagentrollout %q not found in namespace %s (see `kubectl fleet get rollouts`)", o.Name, ns)
		}
		return "", o.conn.Explain(err)
	}
	var field string
	var value any
	done := ""
	switch p := ro.Status.Phase; {
	case ro.Spec.Abort && o.Action != Abort:
		return "", fmt.Errorf("edgeagentrollout/%s was aborted; an aborted roll-out cannot %s", o.Name, o.Action)
	case o.Action == Approve:
		if !ro.Spec.RequireApproval {
			return "", fmt.Errorf("edgeagentrollout/%s does not require approval: its waves start by themselves", o.Name)
		}
		if p != infrav1.AgentRolloutWaitingForApproval {
			return "", fmt.Errorf("edgeagentrollout/%s waits for no approval (it is %s)", o.Name, orPending(string(p)))
		}
		field, value = "approvedWaves", ro.Status.CurrentWave
		done = fmt.Sprintf("approved wave %d", ro.Status.CurrentWave)
	case o.Action == Pause:
		field, value, done = "paused", true, "paused"
	case o.Action == Resume:
		field, value, done = "paused", false, "resumed"
	case o.Action == Abort:
		field, value, done = "abort", true, "aborted: the hosts it moved go back to the release each ran before, the last wave first"
	}
	// "add" also replaces a field that is there; omitempty leaves false out.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/generation", "value": ro.Generation},
		{"op": "add", "path": "/spec/" + field, "value": value},
	})
	if err != nil {
		return "", err
	}
	if err := c.Patch(ctx, ro, kube.RawPatch(types.JSONPatchType, patch)); err != nil {
		// A failed test and a refused value are both 422: the generation
		// tells them apart.
		now := &infrav1.EdgeAgentRollout{}
		if apierrors.IsInvalid(err) && c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, now) == nil && now.Generation != ro.Generation {
			return "", errStale
		}
		return "", o.conn.Explain(err)
	}
	return done, nil
}
