package delete

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/progress"
	"github.com/edgefleet/fleet/pkg/cli/validate"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Options is `kubectl fleet delete cluster`.
type Options struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	Name    string
	Wait    bool
	Timeout time.Duration

	conn *kube.Connection
}

// Complete takes the cluster name and builds the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the name and --timeout.
func (o *Options) Validate() error {
	if o.Wait && o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: want a positive duration", o.Timeout)
	}
	return validate.ClusterName(o.Name)
}

// Run deletes the Cluster (Cluster API deletes the rest) and waits.
func (o *Options) Run(ctx context.Context) error {
	conn := o.conn
	c := conn.Client
	ns := conn.Namespace
	cluster := &clusterv1.Cluster{}
	if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster %q not found in namespace %s (see `kubectl fleet get clusters`)", o.Name, ns)
		}
		return conn.Explain(err)
	}
	// Remember the hosts now: their claims are gone once the machines are.
	ems := &infrav1.EdgeMachineList{}
	if err := c.List(ctx, ems, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}); err != nil {
		return conn.Explain(err)
	}
	var hosts []string
	for _, em := range ems.Items {
		if em.Status.HostRef != "" {
			hosts = append(hosts, em.Status.HostRef)
		}
	}
	slices.Sort(hosts)
	if err := c.Delete(ctx, cluster); err != nil && !apierrors.IsNotFound(err) {
		return conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "cluster/%s deleted\n", o.Name)
	if !o.Wait {
		return nil
	}
	if err := progress.Until(ctx, o.Out, o.Timeout, "cluster "+o.Name+" to go", o.gone(hosts)); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "cluster %s is gone; %d host(s) back in the pool\n", o.Name, len(hosts))
	return nil
}

// gone checks that the Cluster and its Machines are gone and that the
// hosts they held are Available again.
func (o *Options) gone(hosts []string) progress.Check {
	c, ns := o.conn.Client, o.conn.Namespace
	return func(ctx context.Context) (string, bool, error) {
		err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: o.Name}, &clusterv1.Cluster{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", false, o.conn.Explain(err)
		}
		gone := apierrors.IsNotFound(err)
		machines := &clusterv1.MachineList{}
		if err := c.List(ctx, machines, kube.InNamespace(ns), kube.MatchingLabels{clusterv1.ClusterNameLabel: o.Name}); err != nil {
			return "", false, o.conn.Explain(err)
		}
		var waiting []string
		for _, h := range hosts {
			host := &infrav1.EdgeHost{}
			if err := c.Get(ctx, kube.ObjectKey{Namespace: ns, Name: h}, host); err == nil && host.Status.Phase != infrav1.HostAvailable {
				waiting = append(waiting, h+"="+string(host.Status.Phase))
			}
		}
		line := fmt.Sprintf("machines left: %d; hosts not yet Available: %d", len(machines.Items), len(waiting))
		if len(waiting) > 0 {
			line += " (" + strings.Join(waiting, ", ") + ")"
		}
		return line, gone && len(machines.Items) == 0 && len(waiting) == 0, nil
	}
}
