package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/units"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/pki"
)

// fakeRunner records commands; one can be made to fail.
type fakeRunner struct {
	mu     sync.Mutex
	ran    []string
	failOn string
}

func (f *fakeRunner) Run(_ context.Context, c cloudconfig.Command) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = append(f.ran, c.String())
	if f.failOn != "" && strings.Contains(c.String(), f.failOn) {
		return []byte("[preflight] Some fatal errors occurred:\n\t[ERROR Port-6443]: Port 6443 is in use\n"), errors.New("exit status 1")
	}
	return nil, nil
}

func sandbox(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range map[string]string{
		"etc/hostname":           "store-17\n",
		"etc/passwd":             "root:x:0:0:root:/root:/bin/bash\nops:x:1001:1001::/home/ops:/bin/bash\n",
		"etc/group":              "root:x:0:\nops:x:1001:\n",
		"etc/fleet/appended.txt": "first line\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "cloudconfig", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func assign(data []byte) *wire.Assignment {
	return &wire.Assignment{ClaimUID: "u1", MachineName: "demo-cp-0", ProviderID: "edge://default/store-17",
		BootstrapFormat: "cloud-config", BootstrapData: data}
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// CABPK's real init cloud-config, run into a sandbox root: every file with
// its content, mode and encoding; users, ntp, commands in cloud-init's
// order; the sentinel; and what the reporters read back.
func TestProvisionCABPKInitControlPlane(t *testing.T) {
	root, state := sandbox(t), t.TempDir()
	run := &fakeRunner{}
	p := New(Options{Root: root, StateDir: state, Runner: run})
	var steps []string
	res, err := p.Provision(context.Background(), assign(golden(t, "cabpk-init-controlplane.yaml")), func(s string) { steps = append(steps, s) })
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"etc/fleet/plain.conf":                       "plain store-17\n",
		"etc/fleet/b64.bin":                          "base64 content\n",
		"etc/fleet/gzip+b64.txt":                     "gzipped content\n",
		"etc/fleet/appended.txt":                     "first line\nsecond line\n",
		"etc/sudoers.d/90-fleet-ops":                 "ops ALL=(ALL) NOPASSWD:ALL\n",
		"run/cluster-api/bootstrap-success.complete": "success\n",
	} {
		if got := read(t, root, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/fleet/plain.conf")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("plain.conf mode %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "etc/kubernetes/pki/ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode %v %v", fi, err)
	}
	if !strings.Contains(read(t, root, "run/kubeadm/kubeadm.yaml"), "edge://default/store-17") {
		t.Error("provider_id not substituted into kubeadm.yaml")
	}
	if !strings.Contains(read(t, root, "home/ops/.ssh/authorized_keys"), "ssh-ed25519") {
		t.Error("authorized_keys not written")
	}
	if !strings.Contains(read(t, root, "etc/systemd/timesyncd.conf.d/fleet-ntp.conf"), "NTP=0.pool.ntp.org 1.pool.ntp.org") {
		t.Error("ntp servers not configured")
	}
	ran := strings.Join(run.ran, "\n")
	order := []string{"echo boot > /run/fleet-bootcmd", "passwd --lock ops", "systemctl try-restart systemd-timesyncd.service",
		"echo pre", "hostnamectl set-hostname store-17", "kubeadm init --config /run/kubeadm/kubeadm.yaml", "echo post"}
	last := -1
	for _, want := range order {
		i := strings.Index(ran, want)
		if i < 0 || i < last {
			t.Fatalf("commands out of order or missing %q:\n%s", want, ran)
		}
		last = i
	}
	if strings.Contains(ran, "useradd") {
		t.Error("useradd ran for a user that exists")
	}
	if res.NodeName != "store-17" || res.ProviderID != "edge://default/store-17" || res.CertificatesExpiry == nil {
		t.Errorf("result %+v", res)
	}
	if steps[len(steps)-1] != "sentinel" || !strings.HasPrefix(steps[0], "bootcmd 1/1") {
		t.Errorf("steps %v", steps)
	}

	// Reset: kubeadm reset, and every file the bootstrap made is gone; a
	// file it only appended to stays.
	if err := p.Reset(context.Background(), "u1", func(string) {}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(run.ran, "\n"), "kubeadm reset -f") {
		t.Error("kubeadm reset not run")
	}
	for _, gone := range []string{"etc/fleet/plain.conf", "run/kubeadm/kubeadm.yaml", "etc/kubernetes/pki/ca.key",
		"run/cluster-api/bootstrap-success.complete", "etc/sudoers.d/90-fleet-ops", "home/ops/.ssh/authorized_keys"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the reset", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/fleet/appended.txt")); err != nil {
		t.Error("the reset removed a file the bootstrap only appended to")
	}
	// Again: a reset is safe to repeat.
	if err := p.Reset(context.Background(), "u1", func(string) {}); err != nil {
		t.Fatalf("second reset: %v", err)
	}
}

// A failing command is reported with its step, the command and the tail of
// its output, and the sentinel is not written.
func TestFailingCommandIsReported(t *testing.T) {
	root := sandbox(t)
	run := &fakeRunner{failOn: "kubeadm join"}
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: run})
	_, err := p.Provision(context.Background(), assign(golden(t, "cabpk-join-worker.yaml")), func(string) {})
	var se *StepError
	if !errors.As(err, &se) || se.Step != "runcmd 1/1" || !strings.Contains(se.Command, "kubeadm join") ||
		!strings.Contains(err.Error(), "Port 6443 is in use") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "run/cluster-api/bootstrap-success.complete")); !errors.Is(err, os.ErrNotExist) {
		t.Error("sentinel written after a failure")
	}
}

func TestRefusals(t *testing.T) {
	root := sandbox(t)
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	a := assign([]byte(`{"ignition":{"version":"3.4.0"}}`))
	a.BootstrapFormat = "ignition"
	var u *cloudconfig.Unsupported
	if _, err := p.Provision(context.Background(), a, func(string) {}); !errors.As(err, &u) {
		t.Errorf("ignition: %v", err)
	}
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\ndisk_setup:\n  /dev/sdb: {table_type: gpt}\n")),
		func(string) {}); !errors.As(err, &u) || !strings.Contains(err.Error(), "disk_setup") {
		t.Errorf("disk_setup: %v", err)
	}
	// A user name that is shell syntax is refused, not run.
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nusers:\n- name: 'x; rm -rf /'\n")),
		func(string) {}); err == nil || !strings.Contains(err.Error(), "not a valid account name") {
		t.Errorf("bad user name: %v", err)
	}
}

// No path in the bootstrap data reaches outside the root, not by "..", not
// through a symlink planted inside the root.
func TestWritesStayInsideTheRoot(t *testing.T) {
	root := sandbox(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	_, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /../../dotdot.txt, content: x}\n")), func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "dotdot.txt")); err != nil {
		t.Errorf("'..' path not kept inside the root: %v", err)
	}
	_, err = p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /escape/pwned.txt, content: x}\n")), func(string) {})
	if err == nil {
		t.Error("a write through a symlink out of the root succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "pwned.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Error("file written outside the root")
	}
}

func TestShellRunner(t *testing.T) {
	dir := t.TempDir()
	r := ShellRunner{Dir: dir, OutputLimit: 64}
	out, err := r.Run(context.Background(), cloudconfig.Command{Shell: "echo hello > greeting; echo out; echo err >&2; exit 3"})
	if err == nil || !strings.Contains(string(out), "out") || !strings.Contains(string(out), "err") {
		t.Fatalf("shell form: %q %v", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "greeting")); string(b) != "hello\n" {
		t.Errorf("command did not run in Dir: %q", b)
	}
	out, err = r.Run(context.Background(), cloudconfig.Command{Argv: []string{"sh", "-c", "for i in $(seq 1 100); do echo line-$i; done"}})
	if err != nil || !strings.Contains(string(out), "line-100") || !strings.Contains(string(out), "earlier bytes dropped") || len(out) > 200 {
		t.Errorf("bounded tail: %q %v", out, err)
	}
}

// A symlink planted by a user is never followed (with root "/" an os.Root
// would allow it); a root-owned one (such as /var/run → /run) is.
func TestUntrustedSymlinksAreRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own symlinks as another user")
	}
	root := sandbox(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "home/ops"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "root/.ssh"), 0o700))
	must(os.Symlink("/root/.ssh", filepath.Join(root, "home/ops/.ssh")))
	must(os.Lchown(filepath.Join(root, "home/ops/.ssh"), 1001, 1001))
	must(os.MkdirAll(filepath.Join(root, "run"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var"), 0o755))
	must(os.Symlink("../run", filepath.Join(root, "var/run")))
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	_, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nusers:\n- name: ops\n  ssh_authorized_keys: [ssh-ed25519 AAAA attacker]\n")), func(string) {})
	if err == nil || !strings.Contains(err.Error(), "symlink not owned by root") {
		t.Fatalf("planted symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "root/.ssh/authorized_keys")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("wrote through the planted symlink")
	}
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /var/run/fleet.pid, content: '1'}\n")), func(string) {}); err != nil {
		t.Fatalf("root-owned symlink refused: %v", err)
	}
	if read(t, root, "run/fleet.pid") != "1" {
		t.Error("not written through the root-owned symlink")
	}
}

// The reset removes what the bootstrap created, never a file that was there
// before it (even one the bootstrap overwrote); the record of created files
// is written ahead, so a bootstrap that fails half-way is still undone.
func TestResetRemovesOnlyWhatTheBootstrapCreated(t *testing.T) {
	root := sandbox(t)
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "etc/containerd.toml"), []byte("operator's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := &fakeRunner{failOn: "kubeadm"}
	p := New(Options{Root: root, StateDir: state, Runner: run})
	_, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /etc/containerd.toml, content: ours}\n- {path: /etc/new.conf, content: new}\nruncmd: [kubeadm init]\n")), func(string) {})
	if err == nil {
		t.Fatal("expected the runcmd to fail")
	}
	run.failOn = ""
	if err := New(Options{Root: root, StateDir: state, Runner: run}).Reset(context.Background(), "u1", func(string) {}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/new.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file the failed bootstrap created survived the reset")
	}
	if _, err := os.Stat(filepath.Join(root, "etc/containerd.toml")); err != nil {
		t.Error("the reset removed a file that existed before the bootstrap")
	}
}

func TestHostnameAndProviderIDAreChecked(t *testing.T) {
	root := sandbox(t)
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("# comment\nx\nruncmd: [[touch, /pwned]] #\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	if _, err := p.Provision(context.Background(), assign([]byte("## template: jinja\n#cloud-config\nruncmd: ['echo {{ ds.meta_data.local_hostname }}']\n")), func(string) {}); err != nil {
		t.Fatalf("first non-comment line is the hostname: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("x\nruncmd: [[touch, /pwned]] #"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("bad name: [x]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\n")), func(string) {}); err == nil || !strings.Contains(err.Error(), "not a valid hostname") {
		t.Fatalf("bad hostname: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := assign([]byte("#cloud-config\n"))
	a.ProviderID = "edge://ns/h'\nruncmd: [x]"
	if _, err := p.Provision(context.Background(), a, func(string) {}); err == nil || !strings.Contains(err.Error(), "providerID") {
		t.Fatalf("bad providerID: %v", err)
	}
}

func TestSpecialModes(t *testing.T) {
	root := sandbox(t)
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /usr/local/bin/tool, content: x, permissions: '4755'}\n")), func(string) {}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "usr/local/bin/tool"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v %v", fi.Mode(), err)
	}
}

// A command that leaves a daemon behind does not hang the step, and a
// timeout kills the whole process group.
func TestRunnerProcessGroups(t *testing.T) {
	r := ShellRunner{Dir: t.TempDir(), Timeout: 2 * time.Second}
	start := time.Now()
	if _, err := r.Run(context.Background(), cloudconfig.Command{Shell: "sleep 30 & echo started"}); err != nil {
		t.Fatalf("daemonising command: %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Error("the step waited for the background process")
	}
	out, err := r.Run(context.Background(), cloudconfig.Command{Shell: "echo before; sleep 30; echo after"})
	if err == nil || !strings.Contains(err.Error(), "timed out") || !strings.Contains(string(out), "before") || strings.Contains(string(out), "after") {
		t.Fatalf("timeout: %q %v", out, err)
	}
}

// fakeUnits records the plans it is given, with the commands run before.
type fakeUnits struct {
	run    *fakeRunner
	plans  []units.Plan
	before []string
	err    error
}

func (f *fakeUnits) Apply(_ context.Context, p units.Plan) ([]string, error) {
	f.plans = append(f.plans, p)
	f.before = append([]string(nil), f.run.ran...)
	return []string{"containerd.service restarted"}, f.err
}

// A bootstrap that writes containerd's config gets containerd restarted
// before kubeadm runs; without D-Bus it goes on, saying so; a failed
// restart fails the step.
func TestUnitsAreRestartedBeforeTheCommands(t *testing.T) {
	data := []byte("#cloud-config\nwrite_files:\n- path: /etc/containerd/config.toml\n  content: version = 2\nruncmd:\n- kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n")
	for _, tc := range []struct {
		name    string
		err     error
		wantErr string
		wantLog string
	}{
		{"restarted", nil, "", "containerd.service restarted"},
		{"no D-Bus", fmt.Errorf("%w (dial unix /run/dbus/system_bus_socket: no such file)", units.ErrNoDBus), "", "not reachable"},
		{"failed", errors.New("restarting containerd.service: job failed"), "restarting units", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &fakeRunner{}
			u := &fakeUnits{run: run, err: tc.err}
			var logs []string
			p := New(Options{Root: sandbox(t), StateDir: t.TempDir(), Runner: run, Units: u, Log: func(m string) { logs = append(logs, m) }})
			_, err := p.Provision(context.Background(), assign(data), func(string) {})
			if len(u.plans) != 1 || !reflect.DeepEqual(u.plans[0].Units, []string{"containerd.service"}) || len(u.before) != 0 {
				t.Fatalf("plans %+v, commands run before: %v", u.plans, u.before)
			}
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(run.ran) != 1 {
					t.Errorf("kubeadm did not run after the restart: %v", run.ran)
				}
				if !strings.Contains(strings.Join(logs, "\n"), tc.wantLog) {
					t.Errorf("logs %q lack %q", logs, tc.wantLog)
				}
				return
			}
			var se *StepError
			if !errors.As(err, &se) || se.Step != tc.wantErr || len(run.ran) != 0 {
				t.Errorf("error %v, commands %v", err, run.ran)
			}
		})
	}
}

// A reset checks the path it deletes as a write checks the path it writes:
// a user who owns a directory on a recorded path and swaps a part of it for
// a link cannot point the delete at another file.
func TestResetRefusesUntrustedSymlinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own symlinks as another user")
	}
	root := sandbox(t)
	state := t.TempDir()
	p := New(Options{Root: root, StateDir: state, Runner: &fakeRunner{}})
	if _, err := p.Provision(context.Background(), assign([]byte("#cloud-config\nwrite_files:\n- {path: /home/ops/app/conf, content: x}\n")), func(string) {}); err != nil {
		t.Fatal(err)
	}
	// The user ops owns /home/ops and swaps app for a link to /etc.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chown(filepath.Join(root, "home/ops"), 1001, 1001))
	must(os.RemoveAll(filepath.Join(root, "home/ops/app")))
	must(os.WriteFile(filepath.Join(root, "etc/conf"), []byte("the operator's\n"), 0o644))
	must(os.Symlink("/etc", filepath.Join(root, "home/ops/app")))
	must(os.Lchown(filepath.Join(root, "home/ops/app"), 1001, 1001))
	err := New(Options{Root: root, StateDir: state, Runner: &fakeRunner{}}).Reset(context.Background(), "u1", func(string) {})
	if err == nil || !strings.Contains(err.Error(), "symlink not owned by root") {
		t.Fatalf("reset through a planted symlink: %v", err)
	}
	if read(t, root, "etc/conf") != "the operator's\n" {
		t.Fatal("the reset deleted a file through the planted symlink")
	}
}

// A reset reports each of its commands as a step, before running it: the
// agent's watchdog counts a long reset as making progress.
func TestResetReportsEachCommand(t *testing.T) {
	run := &fakeRunner{}
	p := New(Options{Root: sandbox(t), StateDir: t.TempDir(), Runner: run, ResetCommands: []cloudconfig.Command{
		{Argv: []string{"kubeadm", "reset", "-f"}}, {Argv: []string{"rm", "-rf", "/var/lib/etcd"}}}})
	var steps []string
	if err := p.Reset(context.Background(), "u1", func(s string) {
		steps = append(steps, fmt.Sprintf("%s after %d run", s, len(run.ran)))
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"reset 1/2 after 0 run", "reset 2/2 after 1 run"}; !slices.Equal(steps, want) {
		t.Errorf("steps %q, want %q", steps, want)
	}
}

// Colour codes a command prints to a pipe do not reach the status.
func TestStepErrorDropsTerminalEscapes(t *testing.T) {
	e := &StepError{Step: "runcmd 1/1", Command: "kubeadm init", Err: errors.New("exit status 1"),
		Output: "\x1b[0;37mKERNEL_VERSION\x1b[0m: \x1b[0;32m6.18\x1b[0m\n[ERROR CRI]: not running"}
	if got := e.Error(); strings.Contains(got, "\x1b") || !strings.Contains(got, "KERNEL_VERSION: 6.18\n[ERROR CRI]: not running") {
		t.Errorf("StepError = %q", got)
	}
}

// Only a control plane's certificates are reported, and read anew each
// time: a worker holds the cluster CA's certificate but not its key, and
// its kubelet rotates its own.
func TestCertificatesExpiryIsTheControlPlanes(t *testing.T) {
	root := sandbox(t)
	p := New(Options{Root: root, StateDir: t.TempDir(), Runner: &fakeRunner{}})
	write := func(rel string, data []byte) {
		t.Helper()
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert := func(validity time.Duration) *pki.CA {
		t.Helper()
		ca, err := pki.NewCA("test", validity)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca := cert(10 * 365 * 24 * time.Hour)
	write("etc/kubernetes/pki/ca.crt", ca.CertPEM)
	write("var/lib/kubelet/pki/kubelet.crt", cert(24*time.Hour).CertPEM)
	if got := p.CertificatesExpiry(); got != nil {
		t.Errorf("a worker reports certificates expiring %s", got)
	}
	write("etc/kubernetes/pki/ca.key", ca.KeyPEM)
	apiserver := cert(365 * 24 * time.Hour)
	write("etc/kubernetes/pki/apiserver.crt", apiserver.CertPEM)
	if got := p.CertificatesExpiry(); got == nil || !got.Equal(apiserver.Cert.NotAfter) {
		t.Errorf("control plane: expiry %v, want the API server certificate's %s", got, apiserver.Cert.NotAfter)
	}
	renewed := cert(2 * 365 * 24 * time.Hour)
	write("etc/kubernetes/pki/apiserver.crt", renewed.CertPEM)
	if got := p.CertificatesExpiry(); got == nil || !got.Equal(renewed.Cert.NotAfter) {
		t.Errorf("after a renewal: expiry %v, want the renewed certificate's %s", got, renewed.Cert.NotAfter)
	}
}
