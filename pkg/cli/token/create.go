package token

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
	"github.com/edgefleet/fleet/pkg/enrolltoken"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
)

// CreateOptions is `kubectl fleet token create`.
type CreateOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams

	HubNamespace    string
	TTL             time.Duration
	Usages          int
	Labels          []string
	RequireApproval bool
	HubURL          string
	Description     string

	conn   *kube.Connection
	labels map[string]string
}

// Complete builds the client.
func (o *CreateOptions) Complete(_ []string) error {
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the flags, and the labels as the hub would.
func (o *CreateOptions) Validate() error {
	if err := validate.Namespace("--hub-namespace", o.HubNamespace); err != nil {
		return err
	}
	if o.TTL < 0 {
		return errors.New("--ttl must not be negative")
	}
	if o.Usages < 0 {
		return errors.New("--usages must not be negative")
	}
	labels, err := validate.Labels("--labels", o.Labels)
	if err != nil {
		return err
	}
	for k := range labels {
		if enrolltoken.ReservedLabel(k) {
			return fmt.Errorf("invalid --labels key %q: labels under fleet.edgefleet.io/ and cluster.x-k8s.io/ are set by the hub and Cluster API, not by tokens", k)
		}
	}
	o.labels = labels
	return nil
}

// Run creates the token and prints how to use it.
func (o *CreateOptions) Run(ctx context.Context) error {
	info := &corev1.ConfigMap{}
	err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.HubNamespace, Name: hubinfo.ConfigMap}, info)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no fleet hub found in namespace %q of context %q (ConfigMap %s missing): is the hub running? Use --hub-namespace to point at it",
			o.HubNamespace, o.conn.Context, hubinfo.ConfigMap)
	}
	if err != nil {
		return o.conn.Explain(fmt.Errorf("reading hub info: %w", err))
	}
	hubURL := o.HubURL
	if hubURL == "" {
		hubURL = info.Data[hubinfo.KeyURL]
	}
	tok, s, err := enrolltoken.New(o.HubNamespace, enrolltoken.Options{
		TTL: o.TTL, UsageLimit: o.Usages, HostNamespace: o.conn.Namespace, HostLabels: o.labels,
		ApprovalRequired: o.RequireApproval, Description: o.Description,
	}, time.Now())
	if err != nil {
		return err
	}
	if err := o.conn.Client.Create(ctx, s); err != nil {
		return o.conn.Explain(fmt.Errorf("creating token Secret: %w", err))
	}
	if hubURL == "" {
		hubURL = "https://<gateway-address>:7443"
		fmt.Fprintln(o.ErrOut, "warning: the hub publishes no URL (start fleet-hub with --gateway-advertise-url, or pass --hub-url); fill it in below")
	}
	fmt.Fprintf(o.Out, "token: %s\n", tok)
	fmt.Fprintf(o.Out, "hosts enrolled with it go to namespace %q", o.conn.Namespace)
	if o.TTL > 0 {
		fmt.Fprintf(o.Out, "; it expires in %s", o.TTL)
	}
	if o.Usages > 0 {
		fmt.Fprintf(o.Out, "; it enrolls at most %d machine(s)", o.Usages)
	}
	fmt.Fprintln(o.Out, ".")
	fmt.Fprintf(o.Out, "\nOn the machine (or in its image, with the token dropped in at first boot):\n\n")
	fmt.Fprintf(o.Out, "  fleet-agent --hub %s \\\n    --ca-cert-hash %s \\\n    --token %s\n", hubURL, info.Data[hubinfo.KeyCAPin], tok)
	return nil
}
