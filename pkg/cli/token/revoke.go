package token

import (
	"context"
	"fmt"
	"strings"

	"github.com/edgefleet/fleet/pkg/enrolltoken"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/cli/validate"
)

// RevokeOptions is `kubectl fleet token revoke ID`.
type RevokeOptions struct {
	flags *kube.ConfigFlags
	genericiooptions.IOStreams
	HubNamespace string
	ID           string

	conn *kube.Connection
}

// Complete takes the token id (a whole token is accepted too, and its
// secret never printed) and builds the client.
func (o *RevokeOptions) Complete(args []string) error {
	o.ID, _, _ = strings.Cut(args[0], ".")
	var err error
	o.conn, err = kube.Connect(o.flags)
	return err
}

// Validate checks the id's form and --hub-namespace.
func (o *RevokeOptions) Validate() error {
	if !enrolltoken.ValidID(o.ID) {
		return fmt.Errorf("invalid token id %q: want the 6 lowercase letters or digits before the dot of <id>.<secret> (see `kubectl fleet token list`)", o.ID)
	}
	return validate.Namespace("--hub-namespace", o.HubNamespace)
}

// Run revokes the token.
func (o *RevokeOptions) Run(ctx context.Context) error {
	s := &corev1.Secret{}
	if err := o.conn.Client.Get(ctx, kube.ObjectKey{Namespace: o.HubNamespace, Name: enrolltoken.SecretName(o.ID)}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("token %q not found in namespace %s (see `kubectl fleet token list`)", o.ID, o.HubNamespace)
		}
		return o.conn.Explain(err)
	}
	if s.Type != enrolltoken.SecretType {
		return fmt.Errorf("secret %s is not an enrollment token", s.Name)
	}
	patch := kube.MergeFrom(s.DeepCopy())
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[enrolltoken.KeyRevoked] = []byte("true")
	if err := o.conn.Client.Patch(ctx, s, patch); err != nil {
		return o.conn.Explain(err)
	}
	fmt.Fprintf(o.Out, "token %s revoked\n", o.ID)
	return nil
}
