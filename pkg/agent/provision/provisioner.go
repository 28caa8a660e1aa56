package provision

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/facts"
	"github.com/edgefleet/fleet/pkg/agent/units"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// SentinelFile is Cluster API's signal that the bootstrap succeeded.
const SentinelFile = "/run/cluster-api/bootstrap-success.complete"

// Options configure a Provisioner.
type Options struct {
	// Root is the root of the host (default "/").
	Root string
	// StateDir keeps the list of what the bootstrap wrote, for the reset.
	StateDir string
	// Runner runs commands (default a ShellRunner in Root).
	Runner Runner
	// ResetCommands undo the bootstrap (default: kubeadm reset -f).
	ResetCommands []cloudconfig.Command
	// PKIDirs hold the control-plane certificates whose earliest expiry is
	// reported, on a host holding the cluster CA's key (a control plane).
	PKIDirs []string
	// NTPRestart is run after NTP servers are configured.
	NTPRestart cloudconfig.Command
	// Units restarts the services whose configuration the bootstrap
	// wrote (containerd, the kubelet) before its commands run; nil skips
	// that (the demo's sandboxes have no systemd of their own).
	Units UnitRestarter
	// Log hears what the provisioner did beyond its steps.
	Log func(msg string)
}

// UnitRestarter restarts what a bootstrap reconfigured: units.Restarter.
type UnitRestarter interface {
	Apply(ctx context.Context, p units.Plan) ([]string, error)
}

// Provisioner runs CABPK's cloud-config. It implements agent.Provisioner.
type Provisioner struct {
	opts Options
	// tr is the transcript of the bootstrap or reset under way; only the
	// agent's worker provisions, one thing at a time.
	tr *transcript
}

var (
	_ agent.Provisioner        = (*Provisioner)(nil)
	_ agent.CertificatesReader = (*Provisioner)(nil)
)

// New makes a Provisioner, filling defaults.
func New(opts Options) *Provisioner {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.Runner == nil {
		opts.Runner = ShellRunner{Dir: opts.Root}
	}
	if opts.ResetCommands == nil {
		opts.ResetCommands = []cloudconfig.Command{{Argv: []string{"kubeadm", "reset", "-f"}}}
	}
	if opts.PKIDirs == nil {
		opts.PKIDirs = []string{"/etc/kubernetes/pki"}
	}
	if opts.NTPRestart.Shell == "" && opts.NTPRestart.Argv == nil {
		opts.NTPRestart = cloudconfig.Command{Argv: []string{"systemctl", "try-restart", "systemd-timesyncd.service"}}
	}
	return &Provisioner{opts: opts}
}

// StepError says which step of the bootstrap failed, with the command's
// output tail.
type StepError struct {
	Step    string
	Command string
	Output  string
	Err     error
}

// Error names the step, the command if any, and what went wrong.
func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed", e.Step)
	if e.Command != "" {
		fmt.Fprintf(&b, ": `%s`", e.Command)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	if out := strings.TrimSpace(ansiEscape.ReplaceAllString(e.Output, "")); out != "" {
		fmt.Fprintf(&b, "\n--- output (tail) ---\n%s", out)
	}
	return b.String()
}

// ansiEscape matches terminal colour and cursor sequences, which some
// commands (kubeadm's system verification) print even to a pipe.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;?]*[A-Za-z]")

// Unwrap returns the step's own error.
func (e *StepError) Unwrap() error { return e.Err }

// written is the record of what a bootstrap created, kept for the reset.
type written struct {
	ClaimUID types.UID `json:"claimUID"`
	Files    []string  `json:"files"`
}

const writtenFile = "bootstrap-files.json"

// Provision runs the assignment's cloud-config: bootcmd, write_files,
// users, ntp, runcmd, then the sentinel.
func (p *Provisioner) Provision(ctx context.Context, a *wire.Assignment, progress func(string)) (agent.Result, error) {
	if a.BootstrapFormat != "" && a.BootstrapFormat != "cloud-config" {
		return agent.Result{}, &cloudconfig.Unsupported{What: "bootstrap format " + strconv.Quote(a.BootstrapFormat)}
	}
	root, err := os.OpenRoot(p.opts.Root)
	if err != nil {
		return agent.Result{}, fmt.Errorf("opening host root %s: %w", p.opts.Root, err)
	}
	defer root.Close()
	hostname, err := hostnameOf(root)
	if err != nil {
		return agent.Result{}, &StepError{Step: "reading the host name", Err: err}
	}
	if !providerIDRE.MatchString(a.ProviderID) {
		return agent.Result{}, &StepError{Step: "checking the assignment", Err: fmt.Errorf("providerID %q is not edge://<namespace>/<name>", a.ProviderID)}
	}
	cfg, err := cloudconfig.Parse(a.BootstrapData, cloudconfig.MetaData{
		LocalHostname: hostname, InstanceID: hostname, ProviderID: a.ProviderID,
	})
	if err != nil {
		return agent.Result{}, &StepError{Step: "parsing the bootstrap data", Err: err}
	}
	p.tr = p.openTranscript(agent.BootstrapTranscript)
	defer func() { p.tr.close(); p.tr = nil }()
	p.tr.note("bootstrap of %s (claim %s)", a.MachineName, a.ClaimUID)
	// The record of what this bootstrap creates is written ahead of each
	// file, so a crash mid-bootstrap still leaves the reset a full list.
	rec := &written{ClaimUID: a.ClaimUID}
	if err := p.saveWritten(rec); err != nil {
		return agent.Result{}, &StepError{Step: "recording the bootstrap", Err: err}
	}
	record := func(file string) error {
		rec.Files = append(rec.Files, file)
		return p.saveWritten(rec)
	}

	if err := p.runCommands(ctx, "bootcmd", cfg.BootCmd, progress); err != nil {
		return agent.Result{}, err
	}
	for i, f := range cfg.WriteFiles {
		step := fmt.Sprintf("write_files %d/%d", i+1, len(cfg.WriteFiles))
		progress(step)
		if err := p.write(root, f, record); err != nil {
			return agent.Result{}, &StepError{Step: step, Command: f.Path, Err: err}
		}
	}
	for i, u := range cfg.Users {
		step := fmt.Sprintf("users %d/%d", i+1, len(cfg.Users))
		progress(step)
		if err := p.ensureUser(ctx, root, u, record); err != nil {
			return agent.Result{}, &StepError{Step: step, Command: u.Name, Err: err}
		}
	}
	if n := cfg.NTP; n != nil && (n.Enabled == nil || *n.Enabled) && len(n.Servers) > 0 {
		progress("ntp")
		if err := p.configureNTP(ctx, root, n.Servers, record); err != nil {
			return agent.Result{}, err
		}
	}
	if err := p.restartUnits(ctx, cfg.WriteFiles, progress); err != nil {
		return agent.Result{}, err
	}
	if err := p.runCommands(ctx, "runcmd", cfg.RunCmd, progress); err != nil {
		return agent.Result{}, err
	}
	progress("sentinel")
	if _, err := root.Stat(rel(SentinelFile)); errors.Is(err, fs.ErrNotExist) {
		if err := p.write(root, cloudconfig.File{Path: SentinelFile, Content: "success\n"}, record); err != nil {
			return agent.Result{}, &StepError{Step: "sentinel", Command: SentinelFile, Err: err}
		}
	}
	p.tr.note("bootstrap succeeded")
	return agent.Result{
		ProviderID:         a.ProviderID,
		NodeName:           nodeName(root, hostname),
		CertificatesExpiry: p.controlPlaneExpiry(root),
	}, nil
}

// CertificatesExpiry reads the control-plane certificates' expiry again.
func (p *Provisioner) CertificatesExpiry() *time.Time {
	root, err := os.OpenRoot(p.opts.Root)
	if err != nil {
		return nil
	}
	defer root.Close()
	return p.controlPlaneExpiry(root)
}

// controlPlaneExpiry is the earliest expiry of the control-plane
// certificates, nil on a worker: a KubeadmControlPlane rolls machines over
// by it, and a worker's kubelet certificates rotate by themselves.
func (p *Provisioner) controlPlaneExpiry(root *os.Root) *time.Time {
	if _, err := root.Stat(rel(controlPlaneCAKey)); err != nil {
		return nil
	}
	return earliestExpiry(root, p.opts.PKIDirs)
}

// controlPlaneCAKey is on control-plane hosts only: workers get the
// cluster CA's certificate, never its key.
const controlPlaneCAKey = "/etc/kubernetes/pki/ca.key"

// runCommands runs one section's commands (bootcmd, runcmd) in order,
// each its own step.
func (p *Provisioner) runCommands(ctx context.Context, section string, cmds []cloudconfig.Command, progress func(string)) error {
	for i, c := range cmds {
		step := fmt.Sprintf("%s %d/%d", section, i+1, len(cmds))
		progress(step)
		if err := p.run(ctx, step, c); err != nil {
			return err
		}
	}
	return nil
}

// configureNTP points systemd-timesyncd at the bootstrap's NTP servers
// and restarts it.
func (p *Provisioner) configureNTP(ctx context.Context, root *os.Root, servers []string, record func(string) error) error {
	const conf = "/etc/systemd/timesyncd.conf.d/fleet-ntp.conf"
	f := cloudconfig.File{Path: conf, Content: "# Written by fleet-agent from the bootstrap's ntp section.\n[Time]\nNTP=" +
		strings.Join(servers, " ") + "\n", Permissions: "0644"}
	if err := p.write(root, f, record); err != nil {
		return &StepError{Step: "ntp", Command: conf, Err: err}
	}
	return p.run(ctx, "ntp", p.opts.NTPRestart)
}

// restartUnits makes the files just written take effect before the
// bootstrap's commands (kubeadm) run. Without systemd's D-Bus API it says
// so and goes on: the bootstrap's own commands may do it.
func (p *Provisioner) restartUnits(ctx context.Context, files []cloudconfig.File, progress func(string)) error {
	if p.opts.Units == nil {
		return nil
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path)
	}
	plan := units.PlanFor(paths)
	if !plan.Reload && len(plan.Units) == 0 {
		return nil
	}
	progress("restarting units")
	report, err := p.opts.Units.Apply(ctx, plan)
	for _, line := range report {
		p.log(line)
	}
	if errors.Is(err, units.ErrNoDBus) {
		p.log(err.Error())
		return nil
	}
	if err != nil {
		return &StepError{Step: "restarting units", Command: strings.Join(plan.Units, " "), Err: err}
	}
	return nil
}

func (p *Provisioner) log(msg string) {
	if p.opts.Log != nil {
		p.opts.Log(msg)
	}
}

// write writes a file and, if the bootstrap creates it, records it for the
// reset first. A file that was already there is left to its owner.
func (p *Provisioner) write(root *os.Root, f cloudconfig.File, record func(string) error) error {
	_, err := root.Lstat(rel(f.Path))
	if errors.Is(err, fs.ErrNotExist) {
		if err := record(f.Path); err != nil {
			return fmt.Errorf("recording %s: %w", f.Path, err)
		}
	}
	_, err = writeFile(root, f)
	return err
}

func (p *Provisioner) run(ctx context.Context, step string, c cloudconfig.Command) error {
	if p.tr != nil {
		p.tr.note("%s: %s", step, c.String())
	}
	var out []byte
	var err error
	if tr, ok := p.opts.Runner.(TranscriptRunner); ok && p.tr != nil {
		out, err = tr.RunTo(ctx, c, p.tr)
	} else {
		out, err = p.opts.Runner.Run(ctx, c)
		_, _ = p.tr.Write(out)
	}
	if err != nil {
		if p.tr != nil {
			p.tr.note("%s failed: %v", step, err)
		}
		return &StepError{Step: step, Command: c.String(), Output: string(out), Err: err}
	}
	return nil
}

// Reset undoes a bootstrap: the reset commands, then every file it wrote.
// It is safe to repeat.
func (p *Provisioner) Reset(ctx context.Context, claim types.UID, progress func(string)) error {
	p.tr = p.openTranscript(agent.ResetTranscript)
	defer func() { p.tr.close(); p.tr = nil }()
	p.tr.note("reset (claim %s)", claim)
	for i, c := range p.opts.ResetCommands {
		step := fmt.Sprintf("reset %d/%d", i+1, len(p.opts.ResetCommands))
		progress(step)
		if err := p.run(ctx, step, c); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(p.opts.Root)
	if err != nil {
		return fmt.Errorf("opening host root %s: %w", p.opts.Root, err)
	}
	defer root.Close()
	var rec written
	if p.opts.StateDir != "" {
		b, err := os.ReadFile(path.Join(p.opts.StateDir, writtenFile))
		switch {
		case err == nil:
			if err := json.Unmarshal(b, &rec); err != nil {
				return fmt.Errorf("reading what the bootstrap wrote: %w", err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("reading what the bootstrap wrote: %w", err)
		}
	}
	// Files of whatever claim the record is for: a reset leaves nothing
	// of any bootstrap behind.
	for _, f := range sortedUnique(append(rec.Files, SentinelFile)) {
		// The same check as the write: a directory on the path may since
		// have been swapped for a link that points the delete elsewhere.
		if err := checkNoUntrustedLinks(root, rel(path.Dir(f))); err != nil {
			return &StepError{Step: "reset: removing bootstrap files", Command: f, Err: err}
		}
		if err := root.Remove(rel(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return &StepError{Step: "reset: removing bootstrap files", Command: f, Err: err}
		}
	}
	if p.opts.StateDir == "" {
		return nil
	}
	if err := os.Remove(path.Join(p.opts.StateDir, writtenFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// The host is clean; the record only names files that are gone,
		// and the next bootstrap replaces it. A full or read-only state
		// directory must not fail a reset that did its work.
		p.log(fmt.Sprintf("cannot forget the bootstrap of claim %s (its files are removed): %v", claim, err))
	}
	p.tr.note("reset done")
	return nil
}

func (p *Provisioner) saveWritten(rec *written) error {
	if p.opts.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(p.opts.StateDir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(path.Join(p.opts.StateDir, writtenFile), b, 0o600)
}

// rel turns an absolute host path into one relative to the root.
func rel(p string) string {
	r := strings.TrimLeft(path.Clean("/"+p), "/")
	if r == "" {
		return "."
	}
	return r
}

// writeFile writes one write_files entry under root, with its mode and
// owner. It reports whether it created the file (a file that existed before
// is not the bootstrap's to remove on reset).
//
// Symlinks owned by anyone but root are never followed, anywhere on the
// path: with root "/" an os.Root cannot stop a link to elsewhere on the
// host, and a user who owns ~/.ssh could otherwise point the next
// bootstrap's authorized_keys at /root/.ssh or /etc/shadow.
func writeFile(root *os.Root, f cloudconfig.File) (created bool, err error) {
	data, err := f.Decode()
	if err != nil {
		return false, err
	}
	mode, err := f.Mode()
	if err != nil {
		return false, err
	}
	user, group := f.OwnerParts()
	uid, gid, err := lookupOwner(root, user, group)
	if err != nil {
		return false, err
	}
	name := rel(f.Path)
	if err := checkNoUntrustedLinks(root, name); err != nil {
		return false, err
	}
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return false, err
	}
	if err := checkNoUntrustedLinks(root, name); err != nil {
		return false, err
	}
	_, statErr := root.Lstat(name)
	created = errors.Is(statErr, fs.ErrNotExist)
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC | syscall.O_NOFOLLOW
	if f.Append {
		flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND | syscall.O_NOFOLLOW
	}
	fh, err := root.OpenFile(name, flags, 0o600)
	if err != nil {
		return created, err
	}
	defer fh.Close()
	// Mode and owner are set on the open file, not by name, so they cannot
	// be redirected either.
	if os.Geteuid() == 0 {
		if err := fh.Chown(uid, gid); err != nil {
			return created, err
		}
	}
	if err := fh.Chmod(fileMode(mode)); err != nil {
		return created, err
	}
	if _, err := fh.Write(data); err != nil {
		return created, err
	}
	return created, fh.Close()
}

// fileMode turns a numeric mode, special bits included, into an os.FileMode.
func fileMode(m uint32) os.FileMode {
	fm := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// checkNoUntrustedLinks refuses a path that passes through a symlink not
// owned by root.
func checkNoUntrustedLinks(root *os.Root, name string) error {
	parts := strings.Split(name, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
			return fmt.Errorf("refusing to follow /%s: a symlink not owned by root", p)
		}
	}
	return nil
}

// lookupOwner resolves names through the root's own /etc/passwd and
// /etc/group, as the host would, not the agent's.
func lookupOwner(root *os.Root, user, group string) (int, int, error) {
	uid, err := lookupID(root, "etc/passwd", user)
	if err != nil {
		return 0, 0, fmt.Errorf("owner %q: %w", user, err)
	}
	gid, err := lookupID(root, "etc/group", group)
	if err != nil {
		return 0, 0, fmt.Errorf("group %q: %w", group, err)
	}
	return uid, gid, nil
}

func lookupID(root *os.Root, db, name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	if name == "root" {
		return 0, nil
	}
	b, err := root.ReadFile(db)
	if err != nil {
		return 0, fmt.Errorf("no /%s to look it up in", db)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 3 && fields[0] == name {
			return strconv.Atoi(fields[2])
		}
	}
	return 0, fmt.Errorf("not found in /%s", db)
}

var hostnameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,62})(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}))*$`)

// hostnameOf reads the host's name: the first non-comment line of
// /etc/hostname (as systemd does), else the kernel's. It must be a valid
// hostname: it is substituted into the bootstrap data before parsing, where
// anything else could change the document's structure.
func hostnameOf(root *os.Root) (string, error) {
	h := ""
	if b, err := root.ReadFile("etc/hostname"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				h = line
				break
			}
		}
	}
	if h == "" {
		h, _ = os.Hostname()
	}
	if len(h) > 253 || !hostnameRE.MatchString(h) {
		return "", fmt.Errorf("the host name %q is not a valid hostname", h)
	}
	return h, nil
}

var providerIDRE = regexp.MustCompile(`^edge://[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

// nodeName is what the kubelet will register: nodeRegistration.name from
// the kubeadm configuration the bootstrap wrote, or the hostname.
func nodeName(root *os.Root, hostname string) string {
	for _, f := range []string{"run/kubeadm/kubeadm.yaml", "run/kubeadm/kubeadm-join-config.yaml"} {
		b, err := root.ReadFile(f)
		if err != nil {
			continue
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var d struct {
				Kind             string `json:"kind"`
				NodeRegistration struct {
					Name string `json:"name"`
				} `json:"nodeRegistration"`
			}
			if yaml.Unmarshal([]byte(doc), &d) == nil && d.NodeRegistration.Name != "" &&
				(d.Kind == "InitConfiguration" || d.Kind == "JoinConfiguration") {
				return strings.ToLower(d.NodeRegistration.Name)
			}
		}
	}
	return strings.ToLower(hostname)
}

// earliestExpiry is the soonest NotAfter among the certificates (*.crt,
// *.pem) under dirs, or nil when there are none.
func earliestExpiry(root *os.Root, dirs []string) *time.Time {
	certs := facts.Certificates(root.FS(), dirs)
	if len(certs) == 0 {
		return nil
	}
	t := certs[0].NotAfter.UTC()
	return &t
}

// sortedUnique is used by the reset to remove each file once.
func sortedUnique(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
