package agent

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

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

// Run changes the roll-out's spec, with the resourceVersion read so that
// two operators never undo each other.
func (o *ControlOptions) Run(ctx context.Context) error {
	c, ns := o.conn.Client, o.conn.Namespace
	ro := &infrav1.EdgeAgentRollout{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("edgeagentrollout %q not found in namespace %s (see `kubectl fleet get rollouts`)", o.Name, ns)
		}
		return o.conn.Explain(err)
	}
	patch := kube.MergeFromWithOptimisticLock(ro.DeepCopy())
	done := ""
	switch p := ro.Status.Phase; {
	case ro.Spec.Abort && o.Action != Abort:
		return fmt.Errorf("edgeagentrollout/%s was aborted; an aborted roll-out cannot %s", o.Name, o.Action)
	case o.Action == Approve:
		if !ro.Spec.RequireApproval {
			return fmt.Errorf("edgeagentrollout/%s does not require approval: its waves start by themselves", o.Name)
		}
		if p != infrav1.AgentRolloutWaitingForApproval {
			return fmt.Errorf("edgeagentrollout/%s waits for no approval (it is %s)", o.Name, orPending(string(p)))
		}
		ro.Spec.ApprovedWaves = ro.Status.CurrentWave
		done = fmt.Sprintf("approved wave %d", ro.Status.CurrentWave)
	case o.Action == Pause:
		ro.Spec.Paused, done = true, "paused"
	case o.Action == Resume:
		ro.Spec.Paused, done = false, "resumed"
	case o.Action == Abort:
		ro.Spec.Abort, done = true, "aborted: the hosts it moved go back to the release each ran before, the last wave first"
	}
	if err := c.Patch(ctx, ro, patch); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("edgeagentrollout/%s changed meanwhile: run the command again", o.Name)
		}
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgeagentrollout/%s %s\n", o.Name, done)
	if o.Action == Abort && o.Wait {
		return progress.Until(ctx, o.Out, o.Timeout, "edgeagentrollout/"+o.Name+" to move its hosts back", Watch(c, ns, o.Name, infrav1.AgentRolloutAborted))
	}
	return nil
}
