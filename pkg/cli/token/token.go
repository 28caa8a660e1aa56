package token

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/gateway"
)

// NewCmd returns `kubectl fleet token`.
func NewCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Manage enrollment tokens for edge machines",
		Long: "Enrollment tokens let edge machines join the fleet. A token is <id>.<secret>; the hub keeps only a hash\n" +
			"of the secret, so the full token is shown once, by `create`.",
	}
	cmd.AddCommand(newCreateCmd(flags, streams), newListCmd(flags, streams), newRevokeCmd(flags, streams))
	return cmd
}

// hubFlags are shared by the token commands.
type hubFlags struct {
	hubNamespace string
}

func (h *hubFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.hubNamespace, "hub-namespace", "fleet-system", "Namespace of the fleet hub (its tokens and CA).")
}

// CreateOptions is `kubectl fleet token create`.
type CreateOptions struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	hubFlags

	TTL             time.Duration
	Usages          int
	Labels          []string
	RequireApproval bool
	HubURL          string
	Description     string

	conn   *kube.Connection
	labels map[string]string
}

func newCreateCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &CreateOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create an enrollment token and print the fleet-agent command that uses it",
		Example: `  # A token for one machine at store 17, valid for a day
  kubectl fleet token create --usages 1 --labels site=store-17,topology.kubernetes.io/zone=eu-west

  # A token for a batch of images, whose hosts wait for approval
  kubectl fleet token create --ttl 168h --usages 50 --require-approval`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.bind(cmd)
	cmd.Flags().DurationVar(&o.TTL, "ttl", 24*time.Hour, "How long the token is valid; 0 never expires (discouraged).")
	cmd.Flags().IntVar(&o.Usages, "usages", 1, "How many machines may enroll with it; 0 is unlimited.")
	cmd.Flags().StringSliceVar(&o.Labels, "labels", nil, "Labels to put on every host enrolled with it (k=v,…).")
	cmd.Flags().BoolVar(&o.RequireApproval, "require-approval", false, "Hosts wait for `kubectl fleet host approve` before they can be used.")
	cmd.Flags().StringVar(&o.HubURL, "hub-url", "", "Gateway URL agents dial (default: the one the hub publishes).")
	cmd.Flags().StringVar(&o.Description, "description", "", "Free text kept with the token.")
	return cmd
}

// Complete connects and parses labels.
func (o *CreateOptions) Complete() error {
	var err error
	if o.conn, err = kube.Connect(o.flags); err != nil {
		return err
	}
	o.labels = map[string]string{}
	for _, l := range o.Labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--labels %q: want key=value", l)
		}
		o.labels[k] = v
	}
	return nil
}

// Validate checks the flags.
func (o *CreateOptions) Validate() error {
	if o.TTL < 0 {
		return errors.New("--ttl must not be negative")
	}
	if o.Usages < 0 {
		return errors.New("--usages must not be negative")
	}
	return nil
}

// Run creates the token and prints how to use it.
func (o *CreateOptions) Run(ctx context.Context) error {
	info := &corev1.ConfigMap{}
	err := o.conn.Client.Get(ctx, client.ObjectKey{Namespace: o.hubNamespace, Name: gateway.InfoConfigMap}, info)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no fleet hub found in namespace %q of context %q (ConfigMap %s missing): is the hub running? Use --hub-namespace to point at it",
			o.hubNamespace, o.conn.Context, gateway.InfoConfigMap)
	}
	if err != nil {
		return o.conn.Explain(fmt.Errorf("reading hub info: %w", err))
	}
	hubURL := o.HubURL
	if hubURL == "" {
		hubURL = info.Data[gateway.InfoKeyURL]
	}
	tok, _, err := enrollment.Create(ctx, o.conn.Client, o.hubNamespace, enrollment.Options{
		TTL: o.TTL, UsageLimit: o.Usages, HostNamespace: o.conn.Namespace, HostLabels: o.labels,
		ApprovalRequired: o.RequireApproval, Description: o.Description,
	}, time.Now())
	if err != nil {
		return o.conn.Explain(err)
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
	fmt.Fprintf(o.Out, "  fleet-agent --hub %s \\\n    --ca-cert-hash %s \\\n    --token %s\n", hubURL, info.Data[gateway.InfoKeyCAPin], tok)
	return nil
}

// ListOptions is `kubectl fleet token list`.
type ListOptions struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	hubFlags
}

func newListCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &ListOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List enrollment tokens (never their secrets)",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.Run(cmd.Context()) },
	}
	o.bind(cmd)
	return cmd
}

// Run prints the tokens as a table.
func (o *ListOptions) Run(ctx context.Context) error {
	conn, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	list := &corev1.SecretList{}
	if err := conn.Client.List(ctx, list, client.InNamespace(o.hubNamespace), client.HasLabels{"fleet.edgefleet.io/token-id"}); err != nil {
		return conn.Explain(err)
	}
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "ID", Type: "string"}, {Name: "Expires", Type: "string"}, {Name: "Used", Type: "string"},
		{Name: "Host-Namespace", Type: "string"}, {Name: "Labels", Type: "string"}, {Name: "Approval", Type: "string"},
		{Name: "State", Type: "string"}, {Name: "Age", Type: "string"},
	}}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	now := time.Now()
	for i := range list.Items {
		t, err := enrollment.Parse(&list.Items[i])
		if err != nil {
			continue
		}
		expires, state := "never", "valid"
		if t.Expiration != nil {
			expires = t.Expiration.UTC().Format(time.RFC3339)
			if !now.Before(*t.Expiration) {
				state = "expired"
			}
		}
		limit := "∞"
		if t.UsageLimit > 0 {
			limit = strconv.Itoa(t.UsageLimit)
			if t.Usages >= t.UsageLimit {
				state = "used up"
			}
		}
		if t.Revoked {
			state = "revoked"
		}
		approval := "auto"
		if t.ApprovalRequired {
			approval = "manual"
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{
			t.ID, expires, fmt.Sprintf("%d/%s", t.Usages, limit), t.HostNamespace, kube.LabelString(t.HostLabels), approval, state,
			duration.HumanDuration(now.Sub(list.Items[i].CreationTimestamp.Time)),
		}})
	}
	if len(table.Rows) == 0 {
		fmt.Fprintf(o.ErrOut, "No enrollment tokens found in %s namespace.\n", o.hubNamespace)
		return nil
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, o.Out)
}

// RevokeOptions is `kubectl fleet token revoke ID`.
type RevokeOptions struct {
	flags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
	hubFlags
	ID string
}

func newRevokeCmd(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &RevokeOptions{flags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an enrollment token: no further machine can enroll with it",
		Long:  "Revoke an enrollment token. Hosts already enrolled keep their identity; delete their EdgeHost to cut them off.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ID = strings.SplitN(args[0], ".", 2)[0] // accept a whole token too, never print its secret
			return o.Run(cmd.Context())
		},
	}
	o.bind(cmd)
	return cmd
}

// Run revokes the token.
func (o *RevokeOptions) Run(ctx context.Context) error {
	conn, err := kube.Connect(o.flags)
	if err != nil {
		return err
	}
	s := &corev1.Secret{}
	if err := conn.Client.Get(ctx, client.ObjectKey{Namespace: o.hubNamespace, Name: enrollment.SecretName(o.ID)}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("token %q not found in namespace %s (see `kubectl fleet token list`)", o.ID, o.hubNamespace)
		}
		return conn.Explain(err)
	}
	if s.Type != enrollment.SecretType {
		return fmt.Errorf("secret %s is not an enrollment token", s.Name)
	}
	patch := client.MergeFrom(s.DeepCopy())
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[enrollment.KeyRevoked] = []byte("true")
	if err := conn.Client.Patch(ctx, s, patch); err != nil {
		return conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "token %s revoked\n", o.ID)
	return nil
}
