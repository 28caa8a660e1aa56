package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

type chain struct {
	root    ed25519.PrivateKey
	signing ed25519.PrivateKey
	cert    *SignedKey
	roots   Roots
}

func newChain(t *testing.T) chain {
	t.Helper()
	rootPub, root, _ := GenerateKey()
	sigPub, signing, _ := GenerateKey()
	cert, err := Certify(root, sigPub, now.Add(-time.Hour), now.Add(365*24*time.Hour), "ci 2026")
	if err != nil {
		t.Fatal(err)
	}
	return chain{root: root, signing: signing, cert: cert, roots: Roots{rootPub}}
}

func (c chain) sign(t *testing.T, binary []byte, version, minVersion string) []byte {
	t.Helper()
	sum := sha256.Sum256(binary)
	b, err := Sign(c.signing, c.cert, Artifact{Name: AgentName, Version: version, OS: "linux", Arch: "arm64",
		SHA256: hex.EncodeToString(sum[:]), Size: int64(len(binary)), MinVersion: minVersion, Created: now})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(b)
	return raw
}

func verify(raw, binary []byte, p Policy) (*Artifact, error) {
	b, err := ParseBundle(raw)
	if err != nil {
		return nil, err
	}
	a, err := VerifyBundle(b, p)
	if err != nil {
		return nil, err
	}
	return a, VerifyBinary(a, bytes.NewReader(binary))
}

func reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return "<" + err.Error() + ">"
}

func TestAReleaseVerifiesOnlyThroughTheWholeChain(t *testing.T) {
	c := newChain(t)
	bin := []byte("fleet-agent v0.5.0 for arm64")
	policy := Policy{Roots: c.roots, OS: "linux", Arch: "arm64", Floor: "v0.4.0", Now: now}
	good := c.sign(t, bin, "v0.5.0", "v0.4.2")
	a, err := verify(good, bin, policy)
	if err != nil {
		t.Fatalf("a good release: %v", err)
	}
	if f := RaiseFloor(policy.Floor, a); f != "v0.4.2" {
		t.Errorf("floor after v0.5.0 (min v0.4.2): %s", f)
	}

	other := newChain(t)
	var edited Bundle
	_ = json.Unmarshal(good, &edited)
	edited.Artifact = bytes.Replace(edited.Artifact, []byte(`v0.5.0`), []byte(`v0.9.0`), 1)
	tampered, _ := json.Marshal(edited)
	// The key's signature over the key is no signature over an artifact.
	var swapped Bundle
	_ = json.Unmarshal(good, &swapped)
	swapped.Signature = swapped.SigningKey.Signature
	swappedRaw, _ := json.Marshal(swapped)
	expired := policy
	expired.Now = now.Add(400 * 24 * time.Hour)
	early := policy
	early.Now = now.Add(-3 * 24 * time.Hour)
	amd64 := policy
	amd64.Arch = "amd64"
	high := policy
	high.Floor = "v0.6.0"
	for _, c := range []struct {
		name       string
		raw, bin   []byte
		p          Policy
		wantReason string
	}{
		{"signed under a root this host does not hold", other.sign(t, bin, "v0.5.0", ""), bin, policy, ReasonUntrusted},
		{"the artifact edited after signing", tampered, bin, policy, ReasonBadSig},
		{"the key's signature passed off as the artifact's", swappedRaw, bin, policy, ReasonBadSig},
		{"the signing key has expired", good, bin, expired, ReasonKeyExpired},
		{"the signing key is not valid yet, beyond the clock skew", good, bin, early, ReasonKeyExpired},
		{"a release for another architecture", good, bin, amd64, ReasonWrongTarget},
		{"below the recorded floor (a rollback attack)", good, bin, high, ReasonBelowFloor},
		{"another binary than the one signed", good, []byte("fleet-agent v0.5.0 for arm64, patched"), policy, ReasonBadBinary},
		{"a binary with the same length but other bytes", good, []byte("fleet-agent v0.5.0 for arm65"), policy, ReasonBadBinary},
		{"not a bundle", []byte(`{"apiVersion":"release.fleet.edgefleet.io/v1","extra":1}`), bin, policy, ReasonMalformed},
	} {
		_, err := verify(c.raw, c.bin, c.p)
		if err == nil || reason(err) != c.wantReason {
			t.Errorf("%s: %v (reason %s), want %s", c.name, err, reason(err), c.wantReason)
		}
	}
	// Within the clock skew, a key about to start is accepted.
	soon := policy
	soon.Now = now.Add(-2 * time.Hour)
	if _, err := verify(good, bin, soon); err != nil {
		t.Errorf("a host clock an hour behind: %v", err)
	}
}

func TestSigningRefusesWhatCouldNotVerify(t *testing.T) {
	c := newChain(t)
	a := Artifact{Name: AgentName, Version: "v0.5.0", OS: "linux", Arch: "amd64", SHA256: strings.Repeat("ab", 32), Size: 1}
	for _, bad := range []func(*Artifact){
		func(a *Artifact) { a.Version = "0.5.0" },
		func(a *Artifact) { a.Version = "010d127" },
		func(a *Artifact) { a.MinVersion = "v0.6.0" },
		func(a *Artifact) { a.SHA256 = "abc" },
		func(a *Artifact) { a.Size = 0 },
		func(a *Artifact) { a.OS = "" },
	} {
		b := a
		bad(&b)
		if _, err := Sign(c.signing, c.cert, b); err == nil {
			t.Errorf("signed %+v", b)
		}
	}
	if _, err := Sign(newChain(t).signing, c.cert, a); err == nil || !strings.Contains(err.Error(), "not for this key") {
		t.Errorf("a key with another key's certificate: %v", err)
	}
	if _, err := Certify(c.root, c.signing.Public().(ed25519.PublicKey), now, now, ""); err == nil {
		t.Error("certified a key valid for no time")
	}
}

func TestRootsFile(t *testing.T) {
	pub, _, _ := GenerateKey()
	file := "# fleet release roots\n\n" + RootLine(pub, "offline root 2026") + "\n"
	r, err := ParseRoots([]byte(file))
	if err != nil || len(r) != 1 || !r[0].Equal(pub) {
		t.Fatalf("ParseRoots: %v %v", r, err)
	}
	other, _, _ := GenerateKey()
	for _, bad := range []string{
		"",
		"# only comments\n",
		"fleet-release-root deadbeefdeadbeef " + strings.Fields(RootLine(pub, ""))[2],
		"fleet-release-root " + KeyID(other) + " notbase64!",
		"ssh-ed25519 AAAA",
	} {
		if _, err := ParseRoots([]byte(bad)); err == nil {
			t.Errorf("ParseRoots(%q) accepted it", bad)
		}
	}
}

func TestRaiseFloorNeverLowers(t *testing.T) {
	for _, c := range []struct{ floor, min, want string }{
		{"", "", ""}, {"", "v0.3.0", "v0.3.0"}, {"v0.4.0", "v0.3.0", "v0.4.0"}, {"v0.4.0", "v0.4.1", "v0.4.1"}, {"v0.4.0", "", "v0.4.0"},
	} {
		if got := RaiseFloor(c.floor, &Artifact{MinVersion: c.min}); got != c.want {
			t.Errorf("RaiseFloor(%q, %q) = %q, want %q", c.floor, c.min, got, c.want)
		}
	}
}
