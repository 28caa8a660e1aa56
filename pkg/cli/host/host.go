package host

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Action is what `kubectl fleet host` does to the hosts.
type Action string

// The actions, each a label change on the EdgeHost.
const (
	Approve  Action = "approve"
	Cordon   Action = "cordon"
	Uncordon Action = "uncordon"
)

// Options is one `kubectl fleet host` action on some hosts.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Action Action
	Names  []string

	conn *kube.Connection
}

// Complete takes the host names and builds the client.
func (o *Options) Complete(args []string) error {
	o.Names = args
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the action and every name before any host is touched.
func (o *Options) Validate() error {
	switch o.Action {
	case Approve, Cordon, Uncordon:
	default:
		return fmt.Errorf("unknown host action %q: want approve, cordon or uncordon", o.Action)
	}
	var errs []error
	for _, n := range o.Names {
		errs = append(errs, validate.HostName(n))
	}
	return validate.Join(errs...)
}

// Run applies the action to each host by a label change (a merge patch, so
// nothing else on the host is touched). Every host is read first: a name
// that is not there changes none of them.
func (o *Options) Run(ctx context.Context) error {
	hosts := make([]*infrav1.EdgeHost, len(o.Names))
	var missing []error
	for i, name := range o.Names {
		hosts[i] = &infrav1.EdgeHost{}
		err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.conn.Namespace, Name: name}, hosts[i])
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, fmt.Errorf("host %q not found in namespace %s (see `kubectl fleet get hosts`)", name, o.conn.Namespace))
		case err != nil:
			return o.conn.Explain(err)
		}
	}
	if err := validate.Join(missing...); err != nil {
		return err
	}
	for _, h := range hosts {
		if err := o.apply(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

func (o *Options) apply(ctx context.Context, h *infrav1.EdgeHost) error {
	name := h.Name
	patch := kube.MergeFrom(h.DeepCopy())
	if h.Labels == nil {
		h.Labels = map[string]string{}
	}
	var done string
	switch o.Action {
	case Approve:
		if _, gated := h.Labels[infrav1.ApprovalLabel]; !gated {
			fmt.Fprintf(o.Out, "edgehost/%s needs no approval\n", name)
			return nil
		}
		h.Labels[infrav1.ApprovalLabel] = infrav1.ApprovalApproved
		done = "approved"
	case Cordon:
		h.Labels[infrav1.CordonedLabel] = "true"
		done = "cordoned"
	case Uncordon:
		delete(h.Labels, infrav1.CordonedLabel)
		done = "uncordoned"
	}
	if err := o.conn.Client.Patch(ctx, h, patch); err != nil {
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "edgehost/%s %s\n", name, done)
	return nil
}
