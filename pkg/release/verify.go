package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ClockSkew is how far before a signing key's validity an agent's clock
// may be and still accept it: edge hosts boot with wrong clocks.
const ClockSkew = 24 * time.Hour

// Policy is what a bundle is checked against.
type Policy struct {
	// Roots are the root keys held since install time.
	Roots Roots
	// OS and Arch the binary must be for.
	OS, Arch string
	// Floor is the lowest version the agent may run: the highest
	// MinVersion it has verified so far ("" for none).
	Floor string
	// Now is the time to check the signing key's validity at.
	Now time.Time
}

// Error is a refused bundle; Reason is a short word for metrics and
// conditions.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Reasons of an Error.
const (
	ReasonMalformed   = "Malformed"
	ReasonUntrusted   = "UntrustedKey"
	ReasonBadSig      = "BadSignature"
	ReasonKeyExpired  = "KeyNotValid"
	ReasonWrongTarget = "WrongTarget"
	ReasonBelowFloor  = "BelowFloor"
	ReasonBadBinary   = "BinaryMismatch"
)

func refuse(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ParseBundle reads a bundle (at most MaxBundleSize bytes).
func ParseBundle(b []byte) (*Bundle, error) {
	if len(b) > MaxBundleSize {
		return nil, refuse(ReasonMalformed, "a bundle of %d bytes exceeds %d", len(b), MaxBundleSize)
	}
	var bu Bundle
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&bu); err != nil {
		return nil, refuse(ReasonMalformed, "reading the bundle: %v", err)
	}
	if bu.APIVersion != APIVersion {
		return nil, refuse(ReasonMalformed, "bundle apiVersion %q, want %q", bu.APIVersion, APIVersion)
	}
	return &bu, nil
}

// VerifyBundle checks b's chain of signatures and its Artifact against p,
// and returns the Artifact. The binary is checked by VerifyBinary.
func VerifyBundle(b *Bundle, p Policy) (*Artifact, error) {
	root, ok := p.Roots.find(b.SigningKey.RootKeyID)
	if !ok {
		return nil, refuse(ReasonUntrusted, "the signing key is certified by root key %q, which this host does not hold (it holds %s)",
			b.SigningKey.RootKeyID, p.Roots)
	}
	if !ed25519.Verify(root, append([]byte(keyContext), b.SigningKey.Key...), b.SigningKey.Signature) {
		return nil, refuse(ReasonBadSig, "the signing key's certificate does not verify with root key %s", b.SigningKey.RootKeyID)
	}
	var sk SigningKey
	if err := json.Unmarshal(b.SigningKey.Key, &sk); err != nil || len(sk.PublicKey) != ed25519.PublicKeySize {
		return nil, refuse(ReasonMalformed, "reading the signing key: %v", err)
	}
	if p.Now.Before(sk.NotBefore.Add(-ClockSkew)) || !p.Now.Before(sk.NotAfter) {
		return nil, refuse(ReasonKeyExpired, "signing key %s is valid from %s to %s, not at %s", sk.KeyID,
			sk.NotBefore.Format(time.RFC3339), sk.NotAfter.Format(time.RFC3339), p.Now.UTC().Format(time.RFC3339))
	}
	if !ed25519.Verify(sk.PublicKey, append([]byte(artifactContext), b.Artifact...), b.Signature) {
		return nil, refuse(ReasonBadSig, "the artifact's signature does not verify with signing key %s", sk.KeyID)
	}
	var a Artifact
	if err := json.Unmarshal(b.Artifact, &a); err != nil {
		return nil, refuse(ReasonMalformed, "reading the artifact: %v", err)
	}
	if err := a.check(); err != nil {
		return nil, refuse(ReasonMalformed, "artifact: %v", err)
	}
	if a.Name != AgentName || a.OS != p.OS || a.Arch != p.Arch {
		return nil, refuse(ReasonWrongTarget, "the release is %s for %s/%s, this host runs %s on %s/%s", a.Name, a.OS, a.Arch, AgentName, p.OS, p.Arch)
	}
	if p.Floor != "" {
		c, err := Compare(a.Version, p.Floor)
		if err != nil {
			return nil, refuse(ReasonMalformed, "comparing with the floor: %v", err)
		}
		if c < 0 {
			return nil, refuse(ReasonBelowFloor, "version %s is below %s, the lowest this host may run since a release said so", a.Version, p.Floor)
		}
	}
	return &a, nil
}

// VerifyBinary reads r to its end (at most a.Size bytes) and checks it is
// the binary a names.
func VerifyBinary(a *Artifact, r io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, a.Size+1))
	if err != nil {
		return fmt.Errorf("reading the binary: %w", err)
	}
	if n != a.Size {
		return refuse(ReasonBadBinary, "the binary has %d bytes, the release says %d", n, a.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != a.SHA256 {
		return refuse(ReasonBadBinary, "the binary's sha256 is %s, the release says %s", got, a.SHA256)
	}
	return nil
}

// RaiseFloor is the floor after a has been verified: the higher of floor
// and a's MinVersion.
func RaiseFloor(floor string, a *Artifact) string {
	if a.MinVersion == "" {
		return floor
	}
	if floor == "" {
		return a.MinVersion
	}
	if c, err := Compare(a.MinVersion, floor); err == nil && c > 0 {
		return a.MinVersion
	}
	return floor
}

var errNoRoots = errors.New("no release root keys")

// Digest is the hex SHA-256 and the size of what r holds.
func Digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
