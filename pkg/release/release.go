package release

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/blang/semver/v4"
)

// APIVersion names the bundle format.
const APIVersion = "release.fleet.edgefleet.io/v1"

// Domain-separation prefixes: a signature over one kind of document is
// never valid for the other.
const (
	keyContext      = "fleet release signing key v1\x00"
	artifactContext = "fleet release artifact v1\x00"
)

// AgentName is the Artifact name of fleet-agent.
const AgentName = "fleet-agent"

// MaxBundleSize bounds a bundle; it holds a few hundred bytes of JSON.
const MaxBundleSize = 64 << 10

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// SigningKey is a release-signing key as a root key certifies it.
type SigningKey struct {
	KeyID     string            `json:"keyID"`
	PublicKey ed25519.PublicKey `json:"publicKey"`
	NotBefore time.Time         `json:"notBefore"`
	NotAfter  time.Time         `json:"notAfter"`
	Comment   string            `json:"comment,omitempty"`
}

// SignedKey is a SigningKey with a root key's signature. Key holds the
// exact bytes signed (its JSON, base64 in the bundle, so that no
// reformatting of the bundle breaks the signature).
type SignedKey struct {
	Key       []byte `json:"key"`
	RootKeyID string `json:"rootKeyID"`
	Signature []byte `json:"signature"`
}

// Artifact says what a release binary is.
type Artifact struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
	// MinVersion is the floor this release sets: agents that verify it
	// refuse any version below from then on (versions with known flaws).
	MinVersion string    `json:"minVersion,omitempty"`
	Created    time.Time `json:"created"`
}

// Bundle is an Artifact, signed, with the key that signed it.
type Bundle struct {
	APIVersion string `json:"apiVersion"`
	// Artifact holds the exact bytes signed (its JSON, base64).
	Artifact   []byte    `json:"artifact"`
	Signature  []byte    `json:"signature"`
	SigningKey SignedKey `json:"signingKey"`
}

// Certify makes a SignedKey: root signs pub, valid from notBefore to
// notAfter.
func Certify(root ed25519.PrivateKey, pub ed25519.PublicKey, notBefore, notAfter time.Time, comment string) (*SignedKey, error) {
	if !notAfter.After(notBefore) {
		return nil, errors.New("a signing key's validity must end after it starts")
	}
	raw, err := json.Marshal(SigningKey{KeyID: KeyID(pub), PublicKey: pub, NotBefore: notBefore.UTC(), NotAfter: notAfter.UTC(), Comment: comment})
	if err != nil {
		return nil, err
	}
	return &SignedKey{Key: raw, RootKeyID: KeyID(root.Public().(ed25519.PublicKey)),
		Signature: ed25519.Sign(root, append([]byte(keyContext), raw...))}, nil
}

// Sign makes the Bundle of a: key, certified by cert, signs it.
func Sign(key ed25519.PrivateKey, cert *SignedKey, a Artifact) (*Bundle, error) {
	var sk SigningKey
	if err := json.Unmarshal(cert.Key, &sk); err != nil {
		return nil, fmt.Errorf("reading the signing key's certificate: %w", err)
	}
	if !sk.PublicKey.Equal(key.Public()) {
		return nil, fmt.Errorf("the certificate is for signing key %s, not for this key (%s)", sk.KeyID, KeyID(key.Public().(ed25519.PublicKey)))
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return &Bundle{APIVersion: APIVersion, Artifact: raw, Signature: ed25519.Sign(key, append([]byte(artifactContext), raw...)),
		SigningKey: *cert}, nil
}

func (a Artifact) check() error {
	if a.Name == "" || a.OS == "" || a.Arch == "" {
		return errors.New("an artifact needs a name, an OS and an architecture")
	}
	v, err := parseVersion(a.Version)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	if a.MinVersion != "" {
		floor, err := parseVersion(a.MinVersion)
		if err != nil {
			return fmt.Errorf("minimum version: %w", err)
		}
		if v.LT(floor) {
			return fmt.Errorf("version %s is below the floor %s it sets", a.Version, a.MinVersion)
		}
	}
	if sum, err := hex.DecodeString(a.SHA256); err != nil || len(sum) != sha256.Size {
		return fmt.Errorf("sha256 %q: want 64 hex digits", a.SHA256)
	}
	if a.Size <= 0 {
		return fmt.Errorf("size %d: want the binary's size", a.Size)
	}
	return nil
}

// parseVersion reads vMAJOR.MINOR.PATCH[-pre]: releases are semantic
// versions, so that a floor can be compared.
func parseVersion(s string) (semver.Version, error) {
	if len(s) < 2 || s[0] != 'v' {
		return semver.Version{}, fmt.Errorf("%q: want vMAJOR.MINOR.PATCH", s)
	}
	v, err := semver.Parse(s[1:])
	if err != nil {
		return semver.Version{}, fmt.Errorf("%q: want vMAJOR.MINOR.PATCH: %w", s, err)
	}
	return v, nil
}

// Compare compares two release versions like strings.Compare; it fails
// on a string that is not one.
func Compare(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	return va.Compare(vb), nil
}
