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
	if strings.Contains(string(postinst), "systemctl start") || !strings.Contains(string(postinst), "if [ -f /etc/fleet-agent/config.yaml ]") {
		t.Errorf("postinst may start an unconfigured agent:\n%s", postinst)
	}
	if conffiles, _ := os.ReadFile(filepath.Join(ctrl, "conffiles")); !strings.Contains(string(conffiles), "/etc/fleet-agent/config.yaml.example") {
		t.Errorf("conffiles: %q", conffiles)
	}
}
