package selfupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/release"
)

// Files under the store's directory.
const (
	slotsDir    = "slots"
	binaryName  = "fleet-agent"
	bundleName  = "bundle.json"
	currentFile = "current.json"
	trialFile   = "trial.json"
	resultFile  = "result.json"
	floorFile   = "floor"
)

// States of a Result.
const (
	Committed  = "Committed"
	RolledBack = "RolledBack"
)

// Slot names a staged release.
type Slot struct {
	SHA256  string `json:"sha256"`
	Version string `json:"version"`
}

// Trial is a staged release the next start runs on trial.
type Trial struct {
	Slot
	// From is the version that ran before, for the report.
	From string `json:"from"`
	// Within is how long after its start the trial has to commit.
	Within time.Duration `json:"within"`
	// Deadline is when the started trial must have committed.
	Deadline time.Time `json:"deadline,omitzero"`
	// Starts counts the starts of the trial binary; a start that finds
	// it already started knows the trial failed.
	Starts int `json:"starts"`
}

// Result is how the last trial ended.
type Result struct {
	Slot
	From   string    `json:"from"`
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// Store keeps the staged releases, the committed one, the trial and the
// floor, in Dir (the agent's state directory's "releases").
type Store struct {
	Dir string
}

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Binary is the path of slot's binary.
func (s Store) Binary(slot Slot) string {
	return filepath.Join(s.Dir, slotsDir, slot.SHA256, binaryName)
}

// Stage checks bundle and the binary r against p and, if both hold,
// keeps the binary in its slot. Nothing is kept of a refused release.
func (s Store) Stage(r io.Reader, bundle []byte, p release.Policy) (*release.Artifact, error) {
	b, err := release.ParseBundle(bundle)
	if err != nil {
		return nil, err
	}
	if p.Floor == "" {
		p.Floor = s.Floor()
	}
	a, err := release.VerifyBundle(b, p)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, slotsDir, a.SHA256)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, ".binary-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	err = release.VerifyBinary(a, io.TeeReader(r, tmp))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, bundleName), bundle, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, binaryName))
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return a, nil
}

// StageFile is Stage for a binary already in the store's file system, at
// path: it is checked where it lies, then moved into its slot, not copied.
// A refused binary is left where it is.
func (s Store) StageFile(path string, bundle []byte, p release.Policy) (*release.Artifact, error) {
	a, err := s.Check(bundle, p)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	err = release.VerifyBinary(a, f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, slotsDir, a.SHA256)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	err = os.Chmod(path, 0o755)
	if err == nil {
		err = atomicfile.Write(filepath.Join(dir, bundleName), bundle, 0o600)
	}
	if err == nil {
		err = os.Rename(path, filepath.Join(dir, binaryName))
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return a, nil
}

// BeginTrial makes the next start run slot on trial, to commit within
// the given time of that start.
func (s Store) BeginTrial(slot Slot, from string, within time.Duration) error {
	if !shaRE.MatchString(slot.SHA256) {
		return fmt.Errorf("slot %q is not a sha256", slot.SHA256)
	}
	if _, err := os.Stat(s.Binary(slot)); err != nil {
		return fmt.Errorf("release %s is not staged: %w", slot.Version, err)
	}
	if within <= 0 {
		return fmt.Errorf("a trial needs a positive time to commit in, not %s", within)
	}
	return s.save(trialFile, Trial{Slot: slot, From: from, Within: within})
}

// CancelTrial forgets a trial that has not started (its release is no
// longer ordered); one that started is the start rules' to end.
func (s Store) CancelTrial() error {
	t, ok := s.Trial()
	if !ok || t.Starts > 0 {
		return nil
	}
	return s.remove(trialFile)
}

// Current is the committed release; ok is false when none is (the agent
// runs the binary it was installed with).
func (s Store) Current() (Slot, bool) {
	var c Slot
	if err := s.load(currentFile, &c); err != nil || !shaRE.MatchString(c.SHA256) {
		return Slot{}, false
	}
	if _, err := os.Stat(s.Binary(c)); err != nil {
		return Slot{}, false
	}
	return c, true
}

// Trial is the trial under way, if any.
func (s Store) Trial() (Trial, bool) {
	var t Trial
	if err := s.load(trialFile, &t); err != nil || !shaRE.MatchString(t.SHA256) {
		return Trial{}, false
	}
	return t, true
}

// LastResult is how the last trial ended, if one has.
func (s Store) LastResult() (Result, bool) {
	var r Result
	return r, s.load(resultFile, &r) == nil
}

// Report is the store's account for the EdgeHost's status.
func (s Store) Report() *infrav1.AgentReleaseStatus {
	r := &infrav1.AgentReleaseStatus{Floor: s.Floor()}
	if c, ok := s.Current(); ok {
		r.Committed = c.Version
	}
	if res, ok := s.LastResult(); ok {
		r.LastTrial = &infrav1.AgentTrialStatus{Version: res.Version, From: res.From, State: infrav1.AgentTrialState(res.State),
			Reason: res.Reason, Time: metav1.Time{Time: res.At}}
	}
	if *r == (infrav1.AgentReleaseStatus{}) {
		return nil
	}
	return r
}

// Floor is the lowest version this host may run ("" for none yet).
func (s Store) Floor() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, floorFile))
	if err != nil {
		return ""
	}
	return string(b)
}

// Commit makes the trial of slot the committed release, raises the floor
// to what its bundle says, and records the result. Committing a slot that
// is not on trial does nothing.
func (s Store) Commit(slot Slot, now time.Time) error {
	t, ok := s.Trial()
	if !ok || t.SHA256 != slot.SHA256 {
		return nil
	}
	if raw, err := os.ReadFile(filepath.Join(s.Dir, slotsDir, slot.SHA256, bundleName)); err == nil {
		if b, err := release.ParseBundle(raw); err == nil {
			var a release.Artifact
			if json.Unmarshal(b.Artifact, &a) == nil {
				if f := release.RaiseFloor(s.Floor(), &a); f != s.Floor() {
					if err := atomicfile.Write(filepath.Join(s.Dir, floorFile), []byte(f), 0o600); err != nil {
						return err
					}
				}
			}
		}
	}
	if err := s.save(currentFile, slot); err != nil {
		return err
	}
	if err := s.save(resultFile, Result{Slot: slot, From: t.From, State: Committed, At: now.UTC()}); err != nil {
		return err
	}
	return s.remove(trialFile)
}

// rollBack ends the trial as failed.
func (s Store) rollBack(t Trial, reason string, now time.Time) error {
	if err := s.save(resultFile, Result{Slot: t.Slot, From: t.From, State: RolledBack, Reason: reason, At: now.UTC()}); err != nil {
		return err
	}
	return s.remove(trialFile)
}

func (s Store) save(name string, v any) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.Dir, name), b, 0o600)
}

func (s Store) load(name string, v any) error {
	b, err := os.ReadFile(filepath.Join(s.Dir, name))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func (s Store) remove(name string) error {
	if err := os.Remove(filepath.Join(s.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// partialDir holds binaries on their way, by sha256.
const partialDir = "partial"

// Partial is the path of the part of the binary of sha256 received so
// far.
func (s Store) Partial(sha string) string {
	return filepath.Join(s.Dir, partialDir, sha)
}

// Check verifies bundle against p (and the floor this host recorded)
// before anything is fetched.
func (s Store) Check(bundle []byte, p release.Policy) (*release.Artifact, error) {
	b, err := release.ParseBundle(bundle)
	if err != nil {
		return nil, err
	}
	if p.Floor == "" {
		p.Floor = s.Floor()
	}
	return release.VerifyBundle(b, p)
}

// SlotOf is the staged release of version, if the host holds one.
func (s Store) SlotOf(version string) (Slot, bool) {
	entries, err := os.ReadDir(filepath.Join(s.Dir, slotsDir))
	if err != nil {
		return Slot{}, false
	}
	for _, e := range entries {
		if !shaRE.MatchString(e.Name()) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(s.Dir, slotsDir, e.Name(), bundleName))
		if err != nil {
			continue
		}
		b, err := release.ParseBundle(raw)
		if err != nil {
			continue
		}
		var a release.Artifact
		if json.Unmarshal(b.Artifact, &a) != nil || a.Version != version || a.SHA256 != e.Name() {
			continue
		}
		if _, err := os.Stat(filepath.Join(s.Dir, slotsDir, e.Name(), binaryName)); err == nil {
			return Slot{SHA256: a.SHA256, Version: a.Version}, true
		}
	}
	return Slot{}, false
}

// UseInstalled makes the next start run the installed binary: the
// committed release is forgotten (its slot stays).
func (s Store) UseInstalled() error {
	if err := s.remove(trialFile); err != nil {
		return err
	}
	return s.remove(currentFile)
}
