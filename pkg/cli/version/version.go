package version

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
)

// Options is `kubectl fleet version`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	HubNamespace string
	ClientOnly   bool

	conn *kube.Connection
	// connErr is kept, not returned: an unreachable hub is reported.
	connErr error
}

// Complete builds the client unless only the plugin's version is wanted.
func (o *Options) Complete(_ []string) error {
	if !o.ClientOnly {
		o.conn, o.connErr = kube.Connect(o.flags)
	}
	return nil
}

// Validate checks --hub-namespace.
func (o *Options) Validate() error {
	if o.ClientOnly {
		return nil
	}
	return validate.Namespace("--hub-namespace", o.HubNamespace)
}

// Run prints the versions; an unreachable hub is reported, not an error.
func (o *Options) Run(ctx context.Context) error {
	fmt.Fprintf(o.Out, "kubectl-fleet: %s\n", version.Version)
	if o.ClientOnly {
		return nil
	}
	if o.connErr != nil {
		fmt.Fprintf(o.Out, "fleet-hub: unknown (%v)\n", o.connErr)
		return nil
	}
	info := &corev1.ConfigMap{}
	if err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.HubNamespace, Name: hubinfo.ConfigMap}, info); err != nil {
		fmt.Fprintf(o.Out, "fleet-hub: unknown (%v)\n", err)
		return nil
	}
	fmt.Fprintf(o.Out, "fleet-hub: %s\n", info.Data[hubinfo.KeyVersion])
	return nil
}
