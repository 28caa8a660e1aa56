package enrolltoken

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SecretType marks enrollment-token Secrets.
const SecretType corev1.SecretType = "fleet.edgefleet.io/enrollment-token"

// Keys of a token Secret.
const (
	KeyTokenID          = "token-id"
	KeySecretHash       = "token-secret-sha256"
	KeyExpiration       = "expiration"
	KeyUsageLimit       = "usage-limit"
	KeyUsages           = "usages"
	KeyHostNamespace    = "host-namespace"
	KeyHostLabels       = "host-labels"
	KeyApprovalRequired = "approval-required"
	KeyRevoked          = "revoked"
	KeyDescription      = "description"
)

var (
	tokenRE   = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)
	tokenIDRE = regexp.MustCompile(`^[a-z0-9]{6}$`)
)

// ValidID tells whether id has the form of a token's <id> half.
func ValidID(id string) bool { return tokenIDRE.MatchString(id) }

// Refusal reasons. Each is what the enrolling agent is told.
var (
	ErrMalformed = errors.New("token is malformed: want <id>.<secret> as [a-z0-9]{6}.[a-z0-9]{16}")
	ErrUnknown   = errors.New("token is unknown")
	ErrExpired   = errors.New("token has expired")
	ErrUsedUp    = errors.New("token has reached its usage limit")
	ErrRevoked   = errors.New("token was revoked")
)

// SecretName is the name of the Secret that holds token id.
func SecretName(id string) string { return "fleet-token-" + id }

// Options describe a new token.
type Options struct {
	// TTL until expiry; 0 means it never expires (discouraged).
	TTL time.Duration
	// UsageLimit is how many hosts may enroll with it; 0 means unlimited.
	UsageLimit int
	// HostNamespace is where enrolled EdgeHosts go.
	HostNamespace string
	// HostLabels are stamped on every EdgeHost enrolled with it.
	HostLabels map[string]string
	// ApprovalRequired holds enrolled hosts until an operator approves them.
	ApprovalRequired bool
	// Description is free text for operators.
	Description string
}

// Token is a parsed token Secret.
type Token struct {
	ID               string
	Expiration       *time.Time
	UsageLimit       int
	Usages           int
	HostNamespace    string
	HostLabels       map[string]string
	ApprovalRequired bool
	Revoked          bool

	secret *corev1.Secret
	hash   []byte
}

// New makes a token: its full "<id>.<secret>" value, the only time the
// secret half exists outside the host that will use it, and the Secret that
// records it (only a hash of the secret half), for the caller to create.
func New(hubNamespace string, opts Options, now time.Time) (string, *corev1.Secret, error) {
	if opts.HostNamespace == "" {
		return "", nil, errors.New("host namespace is required")
	}
	for k, v := range opts.HostLabels {
		if ReservedLabel(k) {
			return "", nil, fmt.Errorf("host label %q: labels under fleet.edgefleet.io/ and cluster.x-k8s.io/ are set by the hub and Cluster API, not by tokens", k)
		}
		if e := validation.IsQualifiedName(k); len(e) > 0 {
			return "", nil, fmt.Errorf("host label key %q: %s", k, e[0])
		}
		if e := validation.IsValidLabelValue(v); len(e) > 0 {
			return "", nil, fmt.Errorf("host label %s=%q: %s", k, v, e[0])
		}
	}
	id, err := randomString(6)
	if err != nil {
		return "", nil, err
	}
	secretHalf, err := randomString(16)
	if err != nil {
		return "", nil, err
	}
	labels, _ := json.Marshal(opts.HostLabels)
	sum := sha256.Sum256([]byte(secretHalf))
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(id), Namespace: hubNamespace,
			Labels: map[string]string{"fleet.edgefleet.io/token-id": id}},
		Type: SecretType,
		StringData: map[string]string{
			KeyTokenID:          id,
			KeySecretHash:       hex.EncodeToString(sum[:]),
			KeyUsageLimit:       strconv.Itoa(opts.UsageLimit),
			KeyUsages:           "0",
			KeyHostNamespace:    opts.HostNamespace,
			KeyHostLabels:       string(labels),
			KeyApprovalRequired: strconv.FormatBool(opts.ApprovalRequired),
			KeyDescription:      opts.Description,
		},
	}
	if opts.TTL > 0 {
		s.StringData[KeyExpiration] = now.Add(opts.TTL).UTC().Format(time.RFC3339)
	}
	return id + "." + secretHalf, s, nil
}

// Parse reads a token Secret.
func Parse(s *corev1.Secret) (*Token, error) {
	if s.Type != SecretType {
		return nil, fmt.Errorf("secret %s is of type %s, not %s", s.Name, s.Type, SecretType)
	}
	d := func(k string) string { return string(s.Data[k]) }
	t := &Token{ID: d(KeyTokenID), HostNamespace: d(KeyHostNamespace), secret: s}
	var err error
	if t.hash, err = hex.DecodeString(d(KeySecretHash)); err != nil || len(t.hash) != sha256.Size {
		return nil, fmt.Errorf("secret %s: bad %s", s.Name, KeySecretHash)
	}
	if v := d(KeyExpiration); v != "" {
		exp, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return nil, fmt.Errorf("secret %s: bad %s: %w", s.Name, KeyExpiration, err)
		}
		t.Expiration = &exp
	}
	if t.UsageLimit, err = atoi(d(KeyUsageLimit)); err != nil {
		return nil, fmt.Errorf("secret %s: bad %s: %w", s.Name, KeyUsageLimit, err)
	}
	if t.Usages, err = atoi(d(KeyUsages)); err != nil {
		return nil, fmt.Errorf("secret %s: bad %s: %w", s.Name, KeyUsages, err)
	}
	if v := d(KeyHostLabels); v != "" {
		if err := json.Unmarshal([]byte(v), &t.HostLabels); err != nil {
			return nil, fmt.Errorf("secret %s: bad %s: %w", s.Name, KeyHostLabels, err)
		}
	}
	t.ApprovalRequired = d(KeyApprovalRequired) == "true"
	t.Revoked = d(KeyRevoked) == "true"
	return t, nil
}

func atoi(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err == nil && n < 0 {
		err = errors.New("negative")
	}
	return n, err
}

// SecretNameOf is the name of the Secret of a presented token, or
// ErrMalformed.
func SecretNameOf(presented string) (string, error) {
	m := tokenRE.FindStringSubmatch(presented)
	if m == nil {
		return "", ErrMalformed
	}
	return SecretName(m[1]), nil
}

// Admit checks a presented token against t, read from the Secret
// SecretNameOf names: an error when it may not enroll one more host (with
// usage false, the usage limit is not checked: an enrollment being retried
// already counted its use).
func (t *Token) Admit(presented string, now time.Time, usage bool) error {
	m := tokenRE.FindStringSubmatch(presented)
	if m == nil {
		return ErrMalformed
	}
	sum := sha256.Sum256([]byte(m[2]))
	if subtle.ConstantTimeCompare(sum[:], t.hash) != 1 || t.ID != m[1] {
		// Same answer as for an unknown id: do not confirm that an id exists.
		return ErrUnknown
	}
	switch {
	case t.Revoked:
		return ErrRevoked
	case t.Expiration != nil && !now.Before(*t.Expiration):
		return ErrExpired
	case usage && t.UsageLimit > 0 && t.Usages >= t.UsageLimit:
		return ErrUsedUp
	}
	return nil
}

// Secret is the Secret t was parsed from.
func (t *Token) Secret() *corev1.Secret { return t.secret }

// WithUse is t's Secret with one more use recorded, to write with the
// resourceVersion it was read with.
func (t *Token) WithUse() *corev1.Secret {
	s := t.secret.DeepCopy()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[KeyUsages] = []byte(strconv.Itoa(t.Usages + 1))
	return s
}

// WithoutUse is s, a token Secret read afresh, with one use given back; nil
// when there is none to give back (or a count Parse refuses anyway).
func WithoutUse(s *corev1.Secret) *corev1.Secret {
	n, err := atoi(string(s.Data[KeyUsages]))
	if err != nil || n == 0 {
		return nil
	}
	s = s.DeepCopy()
	s.Data[KeyUsages] = []byte(strconv.Itoa(n - 1))
	return s
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

func randomString(n int) (string, error) {
	b := make([]byte, n)
	for i := range b {
		k, err := rand.Int(rand.Reader, big.NewInt(int64(len(alphabet))))
		if err != nil {
			return "", err
		}
		b[i] = alphabet[k.Int64()]
	}
	return string(b), nil
}

// reservedLabelPrefixes are the label domains the hub and Cluster API
// manage: a token that stamped them on a host could make an unclaimed host
// look like a member of a cluster (and a carrier of its tunnels), approved,
// or cordoned.
var reservedLabelPrefixes = []string{"fleet.edgefleet.io/", "cluster.x-k8s.io/"}

// hostSettableLabels are fleet labels that describe the machine itself, which
// an operator may stamp through a token.
var hostSettableLabels = map[string]bool{"fleet.edgefleet.io/interruptible": true}

// ReservedLabel reports whether key is managed by fleet or Cluster API and
// so may not come from a token.
func ReservedLabel(key string) bool {
	if hostSettableLabels[key] {
		return false
	}
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	prefix += "/"
	for _, r := range reservedLabelPrefixes {
		if prefix == r || strings.HasSuffix(prefix, "."+r) {
			return true
		}
	}
	return false
}

// PublicID is the id of a presented token when the token is well formed,
// and "" otherwise: a value sent without its id is all secret, and no part
// of it may reach a log.
func PublicID(presented string) string {
	if m := tokenRE.FindStringSubmatch(presented); m != nil {
		return m[1]
	}
	return ""
}
