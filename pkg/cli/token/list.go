package token

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
)

// ListOptions is `kubectl fleet token list`.
type ListOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	HubNamespace string

	conn *kube.Connection
}

// Complete builds the client.
func (o *ListOptions) Complete(_ []string) error {
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks --hub-namespace.
func (o *ListOptions) Validate() error { return validate.Namespace("--hub-namespace", o.HubNamespace) }

// Run prints the tokens as a table. Tokens are Secrets, which have no
// printer columns of their own, so the table is built here.
func (o *ListOptions) Run(ctx context.Context) error {
	list := &corev1.SecretList{}
	if err := o.conn.Client.List(ctx, list, kube.InNamespace(o.HubNamespace), kube.HasLabels{"fleet.edgefleet.io/token-id"}); err != nil {
		return o.conn.Explain(err)
	}
	table := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "ID", Type: "string"}, {Name: "Expires", Type: "string"}, {Name: "Used", Type: "string"},
		{Name: "Host-Namespace", Type: "string"}, {Name: "Labels", Type: "string"}, {Name: "Approval", Type: "string"},
		{Name: "State", Type: "string"}, {Name: "Age", Type: "string"},
	}}
	slices.SortFunc(list.Items, func(a, b corev1.Secret) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	now := time.Now()
	for i := range list.Items {
		t, err := enrolltoken.Parse(&list.Items[i])
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
			t.ID, expires, fmt.Sprintf("%d/%s", t.Usages, limit), t.HostNamespace, labels.FormatLabels(t.HostLabels), approval, state,
			duration.HumanDuration(now.Sub(list.Items[i].CreationTimestamp.Time)),
		}})
	}
	if len(table.Rows) == 0 {
		fmt.Fprintf(o.ErrOut, "No enrollment tokens found in %s namespace.\n", o.HubNamespace)
		return nil
	}
	return printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(table, o.Out)
}
