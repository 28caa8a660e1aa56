package kubeupgrade

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/blang/semver/v4"

	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/provision"
	"github.com/edgefleet/fleet/pkg/agent/units"
)

// DefaultStagingDir holds one directory per version a host can move to:
// <version>/kubeadm, <version>/kubelet and <version>/images/*.tar.
const DefaultStagingDir = "/opt/fleet/kubernetes"

// Paths on the host that an upgrade changes and a rollback restores.
const (
	manifestsDir  = "/etc/kubernetes/manifests"
	kubeletConfig = "/var/lib/kubelet/config.yaml"
	kubeletFlags  = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletUnit   = "kubelet.service"
	journalFile   = "upgrade.json"
	backupDir     = "upgrade-backup"
)

// Options configure an Upgrader.
type Options struct {
	// Root is the host's root directory (default "/").
	Root string
	// StateDir keeps the journal and the backup.
	StateDir string
	// StagingDir is where staged versions are, under Root (default
	// DefaultStagingDir).
	StagingDir string
	// BinDir holds the kubelet and kubeadm the host runs, under Root
	// (default /usr/local/bin).
	BinDir string
	// Runner runs kubeadm, ctr and kubelet --version.
	Runner provision.Runner
	// Units restarts the kubelet; nil means the host cannot be upgraded
	// (no service manager to restart it with).
	Units provision.UnitRestarter
	// SettleTime is how long the host must serve without a break before
	// the upgrade counts done (default 20 s; negative: at once): a kubelet
	// of another version may recreate the static pods a moment after it
	// starts, taking the API server down again.
	SettleTime time.Duration
	// ReadyTimeout bounds the wait for the new version to serve (default
	// 5 minutes), and that for the old one after a rollback.
	ReadyTimeout time.Duration
	// Probe checks the host serves; default probes the kubelet, the API
	// server and the Node over the host's loopback.
	Probe func(ctx context.Context, version, nodeName string, controlPlane bool) error
	// ClusterVersion is the version the cluster's kubeadm configuration
	// names (kube-system/kubeadm-config); default asks the API server with
	// the kubelet's credentials.
	ClusterVersion func(ctx context.Context) (string, error)
	// Serving is the certificate the host's API server serves; default
	// asks it over the host's loopback.
	Serving func(ctx context.Context) (*x509.Certificate, error)
	// Log hears what the upgrader did beyond its steps.
	Log func(msg string)
}

// Upgrader carries out in-place upgrades. It implements agent.Upgrader.
type Upgrader struct {
	opts Options
	root string
}

// New makes an Upgrader, filling defaults.
func New(opts Options) *Upgrader {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.StagingDir == "" {
		opts.StagingDir = DefaultStagingDir
	}
	if opts.BinDir == "" {
		opts.BinDir = "/usr/local/bin"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 5 * time.Minute
	}
	switch {
	case opts.SettleTime == 0:
		opts.SettleTime = 20 * time.Second
	case opts.SettleTime < 0:
		opts.SettleTime = 0
	}
	u := &Upgrader{opts: opts, root: opts.Root}
	if opts.Probe == nil {
		u.opts.Probe = (&prober{root: opts.Root}).probe
	}
	if opts.Serving == nil {
		u.opts.Serving = (&prober{root: opts.Root}).serving
	}
	if opts.ClusterVersion == nil {
		u.opts.ClusterVersion = (&prober{root: opts.Root}).clusterVersion
	}
	return u
}

// Error is a failed upgrade: the step, what went wrong, and whether the
// host was put back on the old version.
type Error struct {
	Step string
	Err  error
	// RolledBack: the host was changed, and the backup was restored.
	RolledBack bool
	// Rollback is why restoring the backup failed, if it did.
	Rollback error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Step, e.Err)
	switch {
	case e.Rollback != nil:
		msg += fmt.Sprintf("\nrolling back failed too: %v", e.Rollback)
	case e.RolledBack:
		msg += "\nrolled back: the host runs its previous version again"
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// HostRolledBack reports whether the host runs its old version again.
func (e *Error) HostRolledBack() bool { return e.RolledBack }

// FailedStep is the step that failed.
func (e *Error) FailedStep() string { return e.Step }

// journal is the upgrade in progress, on disk before every step.
type journal struct {
	From         string `json:"from"`
	To           string `json:"to"`
	Step         string `json:"step"`
	NodeName     string `json:"nodeName"`
	ControlPlane bool   `json:"controlPlane"`
	// Changed: kubeadm has started changing the host.
	Changed bool `json:"changed"`
	// Swapped: the kubelet and kubeadm binaries are the new ones.
	Swapped bool `json:"swapped"`
}

// Staged lists the versions staged on the host, oldest first.
func (u *Upgrader) Staged() []string {
	entries, err := os.ReadDir(u.host(u.opts.StagingDir))
	if err != nil {
		return nil
	}
	var versions []semver.Version
	for _, e := range entries {
		v, err := parseVersion(e.Name())
		if err != nil || len(e.Name()) > 64 || !e.IsDir() || u.stagedBinaries(e.Name()) != nil {
			continue
		}
		versions = append(versions, v)
	}
	semver.Sort(versions)
	// The newest MaxStaged: what EdgeHost status.facts.kubernetesVersions holds.
	versions = versions[max(0, len(versions)-MaxStaged):]
	out := make([]string, 0, len(versions))
	for _, v := range versions {
		out = append(out, "v"+v.String())
	}
	return out
}

// MaxStaged bounds the staged versions reported.
const MaxStaged = 16

// Running is the version of the kubelet the host runs.
func (u *Upgrader) Running(ctx context.Context) (string, error) {
	out, err := u.opts.Runner.Run(ctx, cloudconfig.Command{Argv: []string{path.Join(u.opts.BinDir, "kubelet"), "--version"}})
	if err != nil {
		return "", fmt.Errorf("kubelet --version: %w: %s", err, strings.TrimSpace(string(out)))
	}
	fields := strings.Fields(string(out)) // "Kubernetes v1.36.3"
	if len(fields) != 2 {
		return "", fmt.Errorf("kubelet --version printed %q, not \"Kubernetes vX.Y.Z\"", strings.TrimSpace(string(out)))
	}
	if _, err := parseVersion(fields[1]); err != nil {
		return "", fmt.Errorf("kubelet --version printed %q: %w", fields[1], err)
	}
	return fields[1], nil
}

// Check says why the host cannot move from one version to another, or nil:
// a downgrade, a skip of a minor version, or a version not staged here.
func (u *Upgrader) Check(from, to string) error {
	f, err := parseVersion(from)
	if err != nil {
		return fmt.Errorf("the host's version %q: %w", from, err)
	}
	t, err := parseVersion(to)
	if err != nil {
		return fmt.Errorf("the ordered version %q: %w", to, err)
	}
	switch {
	case t.LT(f):
		return fmt.Errorf("%s is older than %s, which the host runs: kubeadm cannot downgrade a node", to, from)
	case t.Major != f.Major || t.Minor > f.Minor+1:
		return fmt.Errorf("%s skips a minor version after %s: upgrade one minor version at a time", to, from)
	}
	if err := u.stagedBinaries(to); err != nil {
		staged := u.Staged()
		list := "none"
		if len(staged) > 0 {
			list = strings.Join(staged, ", ")
		}
		return fmt.Errorf("%s is not staged on this host (%v); staged versions: %s", to, err, list)
	}
	return nil
}

// Upgrade moves the host from the version it runs to `to`. nodeName is the
// host's Node. progress hears each step. A returned *Error says whether
// the host was rolled back.
func (u *Upgrader) Upgrade(ctx context.Context, to, nodeName string, bootstrapData []byte, progress func(step string)) error {
	if u.opts.Units == nil {
		return &Error{Step: "checking", Err: errors.New("this agent has no service manager to restart the kubelet with (not run by systemd)")}
	}
	from, err := u.Running(ctx)
	if err != nil {
		return &Error{Step: "checking", Err: err}
	}
	if from == to {
		return nil
	}
	if err := u.Check(from, to); err != nil {
		return &Error{Step: "checking", Err: err}
	}
	settings, err := settingsFromBootstrap(bootstrapData)
	if err != nil {
		return &Error{Step: "checking", Err: err}
	}
	j := &journal{From: from, To: to, NodeName: nodeName, ControlPlane: u.exists(path.Join(manifestsDir, "kube-apiserver.yaml"))}
	step := func(name string) error {
		j.Step = name
		progress(name)
		return u.saveJournal(j)
	}
	fail := func(err error) error {
		if !j.Changed && !j.Swapped {
			_ = u.clear()
			return &Error{Step: j.Step, Err: err}
		}
		return u.rollBack(ctx, j, err, progress)
	}
	if err := step("staging images"); err != nil {
		return &Error{Step: j.Step, Err: fmt.Errorf("recording the upgrade's start: %w", err)}
	}
	if err := u.importImages(ctx, to); err != nil {
		return fail(err)
	}
	if err := step("backing up"); err != nil {
		return fail(err)
	}
	if err := u.backUp(); err != nil {
		return fail(err)
	}
	// The first control plane upgrades the cluster's configuration with
	// it; other nodes follow what it wrote (as do all of a
	// KubeadmControlPlane's, which writes the configuration itself).
	kubeadm := []string{u.staged(to, "kubeadm"), "upgrade", "node"}
	if j.ControlPlane && u.firstControlPlane(ctx, to) {
		kubeadm = []string{u.staged(to, "kubeadm"), "upgrade", "apply", to, "--yes"}
	}
	kubeadm = append(kubeadm, settings.flags()...)
	j.Changed = true
	if err := step(strings.Join(append([]string{"kubeadm"}, kubeadm[1:]...), " ")); err != nil {
		return fail(err)
	}
	if err := u.run(ctx, kubeadm); err != nil {
		return fail(err)
	}
	if err := step("installing kubelet and kubeadm " + to); err != nil {
		return fail(err)
	}
	if err := u.swapBinaries(to); err != nil {
		return fail(err)
	}
	j.Swapped = true
	if err := step("restarting the kubelet"); err != nil {
		return fail(err)
	}
	if err := u.restartKubelet(ctx); err != nil {
		return fail(err)
	}
	if err := step("waiting for node " + nodeName + " to be Ready on " + to); err != nil {
		return fail(err)
	}
	if err := u.waitServing(ctx, to, j); err != nil {
		return fail(err)
	}
	u.log(fmt.Sprintf("Upgraded from %s to %s", from, to))
	return u.clear()
}

// firstControlPlane tells whether this control plane is the first to move
// to version `to`: the cluster's kubeadm configuration names another. One
// that cannot be read is taken for first, as `kubeadm upgrade apply` also
// upgrades a control plane that is not.
func (u *Upgrader) firstControlPlane(ctx context.Context, to string) bool {
	v, err := u.opts.ClusterVersion(ctx)
	if err != nil {
		u.log(fmt.Sprintf("Running kubeadm upgrade apply: the cluster's version could not be read: %v", err))
		return true
	}
	return v != to
}

// Interrupted finishes an upgrade a restart cut short: one that had not
// changed the host is dropped, one that had is rolled back. It returns
// the journal's versions and step, and nil when there was none.
func (u *Upgrader) Interrupted(ctx context.Context, progress func(step string)) (from, to string, err error) {
	j, err := u.loadJournal()
	if err != nil || j == nil {
		return "", "", err
	}
	cause := fmt.Errorf("fleet-agent restarted during the upgrade, at step %q", j.Step)
	if !j.Changed && !j.Swapped {
		return j.From, j.To, &Error{Step: j.Step, Err: cause, Rollback: u.clear()}
	}
	return j.From, j.To, u.rollBack(ctx, j, cause, progress)
}

// rollBack restores the backup, restarts the kubelet on the old version
// and waits for it to serve; the journal goes only when it does.
func (u *Upgrader) rollBack(ctx context.Context, j *journal, cause error, progress func(string)) error {
	failed := &Error{Step: j.Step, Err: cause, RolledBack: true}
	progress("rolling back to " + j.From)
	u.log(fmt.Sprintf("Upgrade to %s failed at %q; rolling back to %s: %v", j.To, j.Step, j.From, cause))
	if err := u.restore(); err != nil {
		failed.RolledBack, failed.Rollback = false, err
		return failed
	}
	if err := u.restartKubelet(ctx); err != nil {
		failed.RolledBack, failed.Rollback = false, err
		return failed
	}
	if err := u.waitServing(ctx, j.From, j); err != nil {
		failed.RolledBack, failed.Rollback = false, fmt.Errorf("the old version does not serve: %w", err)
		return failed
	}
	if err := u.clear(); err != nil {
		failed.Rollback = err
	}
	return failed
}

// Install puts a staged version in place on a host that runs no cluster
// yet, before its bootstrap: the images into containerd, kubelet and
// kubeadm into the binary directory. Nothing runs that a failure could
// break, so there is no backup; the bootstrap after it fails on a half
// install, and the host's reset puts nothing back.
func (u *Upgrader) Install(ctx context.Context, version string, progress func(step string)) error {
	if err := u.stagedBinaries(version); err != nil {
		return err
	}
	progress("staging images of " + version)
	if err := u.importImages(ctx, version); err != nil {
		return fmt.Errorf("importing the images of %s: %w", version, err)
	}
	progress("installing kubelet and kubeadm " + version)
	if err := u.swapBinaries(version); err != nil {
		return err
	}
	return u.clear()
}

func (u *Upgrader) importImages(ctx context.Context, to string) error {
	archives, err := filepath.Glob(filepath.Join(u.host(u.staged(to, "images")), "*.tar"))
	if err != nil {
		return err
	}
	for _, a := range archives {
		argv := []string{"ctr", "-n", "k8s.io", "images", "import", "--no-unpack", path.Join(u.staged(to, "images"), filepath.Base(a))}
		if err := u.run(ctx, argv); err != nil {
			return err
		}
	}
	return nil
}

// backUp copies what kubeadm and the new kubelet change, fresh each time.
func (u *Upgrader) backUp() error {
	dir := filepath.Join(u.opts.StateDir, backupDir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	manifests, err := os.ReadDir(u.host(manifestsDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, m := range manifests {
		if m.Type().IsRegular() {
			if err := copyFile(u.host(path.Join(manifestsDir, m.Name())), filepath.Join(dir, "manifests", m.Name())); err != nil {
				return err
			}
		}
	}
	for _, f := range []string{kubeletConfig, kubeletFlags} {
		if err := copyFile(u.host(f), filepath.Join(dir, "kubelet", path.Base(f))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// restore puts the backup back: the manifests (the kubelet restarts the
// old static pods), the kubelet's files and the old binaries.
func (u *Upgrader) restore() error {
	dir := filepath.Join(u.opts.StateDir, backupDir)
	manifests, err := os.ReadDir(filepath.Join(dir, "manifests"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, m := range manifests {
		if err := copyFile(filepath.Join(dir, "manifests", m.Name()), u.host(path.Join(manifestsDir, m.Name()))); err != nil {
			return fmt.Errorf("restoring %s: %w", m.Name(), err)
		}
	}
	for _, f := range []string{kubeletConfig, kubeletFlags} {
		if err := copyFile(filepath.Join(dir, "kubelet", path.Base(f)), u.host(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restoring %s: %w", f, err)
		}
	}
	for _, name := range []string{"kubelet", "kubeadm"} {
		prev := u.host(path.Join(u.opts.BinDir, ".fleet-previous-"+name))
		if _, err := os.Lstat(prev); err != nil {
			continue // never swapped, or already put back
		}
		if err := os.Rename(prev, u.host(path.Join(u.opts.BinDir, name))); err != nil {
			return fmt.Errorf("restoring %s: %w", name, err)
		}
	}
	return nil
}

// swapBinaries installs the staged kubelet and kubeadm, keeping the old
// ones beside them (a rename in the same directory) until the upgrade ends.
func (u *Upgrader) swapBinaries(to string) error {
	for _, name := range []string{"kubeadm", "kubelet"} {
		dst := u.host(path.Join(u.opts.BinDir, name))
		next := u.host(path.Join(u.opts.BinDir, ".fleet-next-"+name))
		prev := u.host(path.Join(u.opts.BinDir, ".fleet-previous-"+name))
		if err := copyFile(u.host(u.staged(to, name)), next); err != nil {
			return fmt.Errorf("installing %s: %w", name, err)
		}
		if err := os.Chmod(next, 0o755); err != nil {
			return err
		}
		if _, err := os.Lstat(prev); errors.Is(err, fs.ErrNotExist) {
			if err := os.Rename(dst, prev); err != nil {
				return fmt.Errorf("keeping the old %s: %w", name, err)
			}
		}
		if err := os.Rename(next, dst); err != nil {
			return fmt.Errorf("installing %s: %w", name, err)
		}
	}
	return nil
}

func (u *Upgrader) restartKubelet(ctx context.Context) error {
	report, err := u.opts.Units.Apply(ctx, units.Plan{Units: []string{kubeletUnit}})
	for _, line := range report {
		u.log(line)
	}
	if err != nil {
		return fmt.Errorf("restarting %s: %w", kubeletUnit, err)
	}
	return nil
}

// waitServing polls until the host has served on version for SettleTime
// without a break, or ReadyTimeout.
func (u *Upgrader) waitServing(ctx context.Context, version string, j *journal) error {
	ctx, cancel := context.WithTimeout(ctx, u.opts.ReadyTimeout)
	defer cancel()
	var last error
	var since time.Time // the first of the current run of good probes
	for {
		if last = u.opts.Probe(ctx, version, j.NodeName, j.ControlPlane); last != nil {
			since = time.Time{}
		} else if since.IsZero() {
			since = time.Now()
		}
		if !since.IsZero() && time.Since(since) >= u.opts.SettleTime {
			return nil
		}
		select {
		case <-ctx.Done():
			if last == nil {
				return fmt.Errorf("not serving on %s for %s without a break within %s", version, u.opts.SettleTime, u.opts.ReadyTimeout)
			}
			return fmt.Errorf("not serving on %s after %s: %w", version, u.opts.ReadyTimeout, last)
		case <-time.After(min(2*time.Second, u.opts.SettleTime+time.Millisecond)):
		}
	}
}

// clear ends an upgrade: the journal, the backup and the old binaries go.
func (u *Upgrader) clear() error {
	var errs []error
	for _, name := range []string{"kubelet", "kubeadm"} {
		if err := os.Remove(u.host(path.Join(u.opts.BinDir, ".fleet-previous-"+name))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, os.RemoveAll(filepath.Join(u.opts.StateDir, backupDir)))
	if err := os.Remove(filepath.Join(u.opts.StateDir, journalFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (u *Upgrader) saveJournal(j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(u.opts.StateDir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(u.opts.StateDir, journalFile), b, 0o600)
}

func (u *Upgrader) loadJournal() (*journal, error) {
	b, err := os.ReadFile(filepath.Join(u.opts.StateDir, journalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j := &journal{}
	if err := json.Unmarshal(b, j); err != nil {
		return nil, fmt.Errorf("reading the upgrade journal: %w", err)
	}
	return j, nil
}

func (u *Upgrader) run(ctx context.Context, argv []string) error {
	out, err := u.opts.Runner.Run(ctx, cloudconfig.Command{Argv: argv})
	if err != nil {
		return &provision.StepError{Step: argv[0], Command: strings.Join(argv, " "), Output: string(out), Err: err}
	}
	return nil
}

// stagedBinaries says why version's kubeadm or kubelet is not usable.
func (u *Upgrader) stagedBinaries(version string) error {
	for _, name := range []string{"kubeadm", "kubelet"} {
		info, err := os.Stat(u.host(u.staged(version, name)))
		if err != nil {
			return fmt.Errorf("no %s", u.staged(version, name))
		}
		if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", u.staged(version, name))
		}
	}
	return nil
}

func (u *Upgrader) staged(version, name string) string {
	return path.Join(u.opts.StagingDir, version, name)
}

func (u *Upgrader) host(p string) string { return filepath.Join(u.root, filepath.FromSlash(p)) }

func (u *Upgrader) exists(p string) bool {
	_, err := os.Stat(u.host(p))
	return err == nil
}

func (u *Upgrader) log(msg string) {
	if u.opts.Log != nil {
		u.opts.Log(msg)
	}
}

// parseVersion parses "v1.36.3".
func parseVersion(s string) (semver.Version, error) {
	if !strings.HasPrefix(s, "v") {
		return semver.Version{}, fmt.Errorf("%q is not a version vMAJOR.MINOR.PATCH", s)
	}
	return semver.Parse(s[1:])
}

// copyFile copies src to dst atomically, creating dst's directory and
// keeping src's permissions.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fleet-copy-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(info.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
