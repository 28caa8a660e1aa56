package enrollment

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/enrolltoken"
)

// CreateToken makes a token (enrolltoken.New) and creates its Secret in
// hubNamespace; it returns the full "<id>.<secret>" value.
func CreateToken(ctx context.Context, c client.Client, hubNamespace string, opts enrolltoken.Options, now time.Time) (string, *corev1.Secret, error) {
	tok, s, err := enrolltoken.New(hubNamespace, opts, now)
	if err != nil {
		return "", nil, err
	}
	if err := c.Create(ctx, s); err != nil {
		return "", nil, fmt.Errorf("creating token Secret: %w", err)
	}
	return tok, s, nil
}

// Authenticate checks a presented token and returns it if it may enroll one
// more host. reader should not be a cache: a token's use count must be read
// fresh.
func Authenticate(ctx context.Context, reader client.Reader, hubNamespace, presented string, now time.Time) (*enrolltoken.Token, error) {
	return authenticate(ctx, reader, hubNamespace, presented, now, true)
}

// Verify is Authenticate without the usage limit: an enrollment that is
// being retried (its answer was lost) already counted its use.
func Verify(ctx context.Context, reader client.Reader, hubNamespace, presented string, now time.Time) (*enrolltoken.Token, error) {
	return authenticate(ctx, reader, hubNamespace, presented, now, false)
}

func authenticate(ctx context.Context, reader client.Reader, hubNamespace, presented string, now time.Time, usage bool) (*enrolltoken.Token, error) {
	name, err := enrolltoken.SecretNameOf(presented)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: hubNamespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, enrolltoken.ErrUnknown
		}
		return nil, fmt.Errorf("reading token: %w", err)
	}
	t, err := enrolltoken.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", enrolltoken.ErrUnknown, err)
	}
	if err := t.Admit(presented, now, usage); err != nil {
		return nil, err
	}
	return t, nil
}

// Consume records one use of the token. It is an Update with the
// resourceVersion read in Authenticate, so two hosts racing for the last use
// cannot both get it: the loser sees a Conflict and must authenticate again.
func Consume(ctx context.Context, c client.Client, t *enrolltoken.Token) error {
	if err := c.Update(ctx, t.WithUse()); err != nil {
		return fmt.Errorf("recording token use: %w", err)
	}
	t.Usages++
	return nil
}

// Refund gives back the use Consume recorded, for an enrollment that then
// failed: a machine retrying a refused enrollment (a cloned image, facts the
// API server refuses) must not drain its token. It re-reads the Secret and
// retries on conflicts, since other enrollments may have used it meanwhile.
func Refund(ctx context.Context, c client.Client, reader client.Reader, t *enrolltoken.Token) error {
	key := client.ObjectKeyFromObject(t.Secret())
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		s := &corev1.Secret{}
		if err := reader.Get(ctx, key, s); err != nil {
			return fmt.Errorf("reading token %s to give back a use: %w", t.ID, err)
		}
		back := enrolltoken.WithoutUse(s)
		if back == nil {
			return nil
		}
		if err := c.Update(ctx, back); err != nil {
			return fmt.Errorf("giving back a use of token %s: %w", t.ID, err)
		}
		return nil
	})
}
