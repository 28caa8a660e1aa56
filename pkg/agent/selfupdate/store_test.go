package selfupdate

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/release"
)

var t0 = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

type signer struct {
	key   ed25519.PrivateKey
	cert  *release.SignedKey
	roots release.Roots
}

func newSigner(t *testing.T) signer {
	t.Helper()
	rootPub, root, _ := release.GenerateKey()
	pub, key, _ := release.GenerateKey()
	cert, err := release.Certify(root, pub, t0.Add(-time.Hour), t0.Add(24*time.Hour), "")
	if err != nil {
		t.Fatal(err)
	}
	return signer{key: key, cert: cert, roots: release.Roots{rootPub}}
}

func (s signer) release(t *testing.T, binary []byte, version, floor string) []byte {
	t.Helper()
	sum, size, _ := release.Digest(bytes.NewReader(binary))
	b, err := release.Sign(s.key, s.cert, release.Artifact{Name: release.AgentName, Version: version, OS: "linux", Arch: "amd64",
		SHA256: sum, Size: size, MinVersion: floor, Created: t0})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(b)
	return raw
}

func (s signer) policy() release.Policy {
	return release.Policy{Roots: s.roots, OS: "linux", Arch: "amd64", Now: t0}
}

func stage(t *testing.T, st Store, s signer, binary, version, floor string) Slot {
	t.Helper()
	a, err := st.Stage(strings.NewReader(binary), s.release(t, []byte(binary), version, floor), s.policy())
	if err != nil {
		t.Fatalf("staging %s: %v", version, err)
	}
	return Slot{SHA256: a.SHA256, Version: a.Version}
}

// The start rules: a trial runs once; a trial that started and did not
// commit is rolled back to the committed release (or the installed
// binary); a committed trial runs from then on and raises the floor.
func TestTrialThenCommitOrRollBack(t *testing.T) {
	st := Store{Dir: t.TempDir()}
	s := newSigner(t)

	if d, err := st.Decide(t0, "v0.4.9"); err != nil || d.Path != "" {
		t.Fatalf("nothing staged: %+v %v", d, err)
	}
	v1 := stage(t, st, s, "binary v0.5.0", "v0.5.0", "v0.4.0")
	if err := st.BeginTrial(v1, "v0.4.9", time.Minute); err != nil {
		t.Fatal(err)
	}
	d, err := st.Decide(t0, "v0.4.9")
	if err != nil || d.Trial == nil || d.Path != st.Binary(v1) || !d.Trial.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first start of the trial: %+v %v", d, err)
	}
	if b, _ := os.ReadFile(d.Path); string(b) != "binary v0.5.0" {
		t.Fatalf("slot holds %q", b)
	}
	// The trial crashed: the next start rolls it back to the installed binary.
	d, err = st.Decide(t0.Add(10*time.Second), "v0.4.9")
	if err != nil || d.Path != "" || d.RolledBack == nil || !strings.Contains(d.RolledBack.Reason, "stopped before it committed") {
		t.Fatalf("start after a crashed trial: %+v %v", d, err)
	}
	if r, ok := st.LastResult(); !ok || r.State != RolledBack || r.Version != "v0.5.0" {
		t.Errorf("result after the roll-back: %+v", r)
	}

	// Again, and this time the trial commits.
	must(t, st.BeginTrial(v1, "v0.4.9", time.Minute))
	if d, _ := st.Decide(t0, "v0.4.9"); d.Trial == nil {
		t.Fatal("second trial did not run")
	}
	must(t, st.Commit(v1, t0.Add(20*time.Second)))
	if d, err := st.Decide(t0.Add(time.Hour), "v0.4.9"); err != nil || d.Trial != nil || d.Path != st.Binary(v1) {
		t.Fatalf("start after the commit: %+v %v", d, err)
	}
	if f := st.Floor(); f != "v0.4.0" {
		t.Errorf("floor after committing a release with minVersion v0.4.0: %q", f)
	}
	if r, _ := st.LastResult(); r.State != Committed || r.From != "v0.4.9" {
		t.Errorf("result after the commit: %+v", r)
	}

	// A trial of v0.6.0 that never commits in time goes back to v0.5.0.
	v2 := stage(t, st, s, "binary v0.6.0", "v0.6.0", "")
	must(t, st.BeginTrial(v2, "v0.5.0", time.Minute))
	if d, _ := st.Decide(t0, "v0.4.9"); d.Path != st.Binary(v2) {
		t.Fatal("the v0.6.0 trial did not run")
	}
	d, _ = st.Decide(t0.Add(2*time.Minute), "v0.4.9")
	if d.Path != st.Binary(v1) || d.RolledBack == nil || !strings.Contains(d.RolledBack.Reason, "did not reach the hub") {
		t.Errorf("start after a trial past its deadline: %+v", d)
	}
	// A package update installs v0.6.1: it runs rather than the older
	// committed release; a dev build never displaces a release.
	if d, _ := st.Decide(t0.Add(time.Hour), "v0.6.1"); d.Path != "" {
		t.Errorf("an installed v0.6.1 with v0.5.0 committed: runs %s", d.Path)
	}
	if d, _ := st.Decide(t0.Add(time.Hour), "010d127"); d.Path != st.Binary(v1) {
		t.Errorf("an installed dev build with v0.5.0 committed: runs %q", d.Path)
	}
	// Committing a trial that has ended does nothing.
	must(t, st.Commit(v2, t0.Add(3*time.Minute)))
	if c, _ := st.Current(); c != v1 {
		t.Errorf("current after a late commit: %+v", c)
	}
}

// A release that fails a check leaves nothing behind, and the floor a
// committed release set refuses older ones.
func TestStageRefusesAndKeepsNothing(t *testing.T) {
	st := Store{Dir: t.TempDir()}
	s := newSigner(t)
	good := s.release(t, []byte("binary v0.5.0"), "v0.5.0", "v0.5.0")
	for _, c := range []struct {
		name, binary string
		bundle       []byte
		p            release.Policy
	}{
		{"a binary other than the signed one", "binary v0.5.1", good, s.policy()},
		{"signed under another root", "binary v0.5.0", newSigner(t).release(t, []byte("binary v0.5.0"), "v0.5.0", ""), s.policy()},
	} {
		if _, err := st.Stage(strings.NewReader(c.binary), c.bundle, c.p); err == nil {
			t.Errorf("%s: staged", c.name)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(st.Dir, slotsDir)); len(entries) != 0 {
		t.Errorf("refused releases left %d slots", len(entries))
	}
	v := stage(t, st, s, "binary v0.5.0", "v0.5.0", "v0.5.0")
	must(t, st.BeginTrial(v, "v0.4.0", time.Minute))
	_, _ = st.Decide(t0, "v0.4.9")
	must(t, st.Commit(v, t0))
	_, err := st.Stage(strings.NewReader("binary v0.4.0"), s.release(t, []byte("binary v0.4.0"), "v0.4.0", ""), s.policy())
	if err == nil || !strings.Contains(err.Error(), "below v0.5.0") {
		t.Errorf("a release below the floor: %v", err)
	}
	if err := st.BeginTrial(Slot{SHA256: strings.Repeat("0", 64), Version: "v9.9.9"}, "", time.Minute); err == nil {
		t.Error("began the trial of a release that is not staged")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A binary received into the store is checked where it lies and moved
// into its slot; one that is not what its bundle signs stays out; the
// store finds a slot by version, and going back to the installed binary
// forgets the committed release.
func TestStageFileSlotOfAndUseInstalled(t *testing.T) {
	st := Store{Dir: t.TempDir()}
	s := newSigner(t)
	path := st.Partial("x")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("v2 binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := st.StageFile(path, s.release(t, []byte("another binary"), "v0.2.0", ""), s.policy()); err == nil {
		t.Fatal("staged a binary its bundle does not sign")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("a refused binary was not left where it was: %v", err)
	}
	a, err := st.StageFile(path, s.release(t, []byte("v2 binary"), "v0.2.0", ""), s.policy())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("the staged binary was copied, not moved")
	}
	slot, ok := st.SlotOf("v0.2.0")
	if !ok || slot.SHA256 != a.SHA256 {
		t.Fatalf("SlotOf(v0.2.0) = %+v, %v", slot, ok)
	}
	if fi, err := os.Stat(st.Binary(slot)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("slot binary %v %v", fi, err)
	}
	if _, ok := st.SlotOf("v0.3.0"); ok {
		t.Error("SlotOf found a version the store does not hold")
	}
	if err := st.BeginTrial(slot, "v0.1.0", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Decide(t0, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(slot, t0); err != nil {
		t.Fatal(err)
	}
	if cur, ok := st.Current(); !ok || cur != slot {
		t.Fatalf("current %+v", cur)
	}
	if err := st.UseInstalled(); err != nil {
		t.Fatal(err)
	}
	if d, err := st.Decide(t0, "v0.1.0"); err != nil || d.Path != "" {
		t.Fatalf("after UseInstalled the start runs %q (%v), want the installed binary", d.Path, err)
	}
}
