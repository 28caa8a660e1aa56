package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// make packages builds a .deb and an .rpm with nfpm (built from its Go
// module); the .deb holds the binary, the tested unit and an example config
// with the right modes, and its maintainer scripts enable the agent without
// starting it before it is configured.
func TestPackages(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg-deb")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("dpkg-deb missing")
		}
		t.Skip("dpkg-deb missing")
	}
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	dist := t.TempDir()
	out, err := exec.Command("make", "-C", root, "packages", "PKG_ARCHS="+runtime.GOARCH, "PKG_DIST="+dist, "PKG_VERSION=0.1.0").CombinedOutput()
	if err != nil {
		t.Fatalf("make packages: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("packages: %v %v", debs, rpms)
	}
	contents, err := exec.Command(dpkg, "-c", debs[0]).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-rwxr-xr-x root/root", "./usr/bin/fleet-agent",
		"./lib/systemd/system/fleet-agent.service",
		"./lib/systemd/system/fleet-agent-firstboot.service",
		"-rw------- root/root", "./etc/fleet-agent/config.yaml.example",
		"drwx------ root/root", "./etc/fleet-agent/",
	} {
		if !strings.Contains(string(contents), want) {
			t.Errorf("deb lacks %q:\n%s", want, contents)
		}
	}
	x := t.TempDir()
	if out, err := exec.Command(dpkg, "-x", debs[0], x).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	unit, _ := os.ReadFile(filepath.Join(x, "lib/systemd/system/fleet-agent.service"))
	shipped, _ := os.ReadFile(filepath.Join(root, "manifests/agent/fleet-agent.service"))
	if string(unit) != string(shipped) {
		t.Error("packaged unit differs from manifests/agent/fleet-agent.service")
	}
	if out, err := exec.Command(filepath.Join(x, "usr/bin/fleet-agent"), "version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "v0.1.0" {
		t.Errorf("packaged binary: %v %q", err, out)
	}
	ctrl := t.TempDir()
	if out, err := exec.Command(dpkg, "-e", debs[0], ctrl).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	postinst, _ := os.ReadFile(filepath.Join(ctrl, "postinst"))
	if strings.Contains(string(postinst), "systemctl start") || !strings.Contains(string(postinst), "[ -f /etc/fleet-agent/config.yaml ]") {
		t.Errorf("postinst may start an unconfigured agent:\n%s", postinst)
	}
	if conffiles, _ := os.ReadFile(filepath.Join(ctrl, "conffiles")); !strings.Contains(string(conffiles), "/etc/fleet-agent/config.yaml.example") {
		t.Errorf("conffiles: %q", conffiles)
	}

	if os.Geteuid() == 0 || os.Getenv("CI") == "true" {
		installIntoScratchRoot(t, debs[0])
	} else {
		t.Log("not root: skipping the dpkg install into a scratch root")
	}
}

// installIntoScratchRoot installs the .deb with dpkg into an empty root
// (its own dpkg database; maintainer scripts run chrootless and leave the
// host's systemd alone, see $DPKG_ROOT in packaging/), checks files and
// modes and the unit, then removes and purges it.
func installIntoScratchRoot(t *testing.T, deb string) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Fatal("dpkg missing")
	}
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(dpkg, append([]string{"--root=" + root, "--force-script-chrootless"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("-i", deb)
	for path, mode := range map[string]os.FileMode{
		"usr/bin/fleet-agent":                              0o755,
		"lib/systemd/system/fleet-agent.service":           0o644,
		"lib/systemd/system/fleet-agent-firstboot.service": 0o644,
		"etc/fleet-agent":                                  os.ModeDir | 0o700,
		"etc/fleet-agent/config.yaml.example":              0o600,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("after dpkg -i: %v", err)
			continue
		}
		if fi.Mode()&(os.ModeDir|os.ModePerm) != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}
	verifyInRoot(t, root, "lib/systemd/system/fleet-agent.service")
	verifyInRoot(t, root, "lib/systemd/system/fleet-agent-firstboot.service")
	run("-r", "fleet-agent")
	for _, gone := range []string{"usr/bin/fleet-agent", "lib/systemd/system/fleet-agent.service"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !os.IsNotExist(err) {
			t.Errorf("%s left after dpkg -r", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/fleet-agent/config.yaml.example")); err != nil {
		t.Errorf("dpkg -r removed a conffile (only --purge should): %v", err)
	}
	run("--purge", "fleet-agent")
	if _, err := os.Stat(filepath.Join(root, "etc/fleet-agent/config.yaml.example")); !os.IsNotExist(err) {
		t.Errorf("config example left after --purge")
	}
}
