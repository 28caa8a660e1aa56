package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// install puts the binary, configuration, unit and enable symlink into an
// image root; the installed agent reads that configuration (its token file
// dropped in later); uninstall takes it all back out.
func TestInstallIntoImageRoot(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root := filepath.Join(dir, "image")
	pin := "sha256:" + strings.Repeat("ab", 32)
	out, err := exec.Command(bin, "install", "--root", root, "--hub", "https://hub.example.com:7443", "--ca-cert-hash", pin).CombinedOutput()
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, p := range []string{installBin, installConfig, installUnit, installFirstBootUnit} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s missing: %v", p, err)
		}
	}
	for unit, link := range map[string]string{installUnit: installEnabled, installFirstBootUnit: installFirstBootEnabled} {
		if target, err := os.Readlink(filepath.Join(root, link)); err != nil || target != "/"+unit {
			t.Errorf("enable symlink %s -> %q (%v)", link, target, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, installConfig)); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v", fi)
	}
	cfg, err := os.ReadFile(filepath.Join(root, installConfig))
	if err != nil || !strings.Contains(string(cfg), "hub: https://hub.example.com:7443") || !strings.Contains(string(cfg), "tokenFile: /etc/fleet-agent/token") {
		t.Errorf("config:\n%s", cfg)
	}
	unit, _ := os.ReadFile(filepath.Join(root, installUnit))
	shipped, _ := os.ReadFile(filepath.Join("..", "..", "manifests", "agent", "fleet-agent.service"))
	verifyInRoot(t, root, installUnit)
	if string(unit) != string(shipped) {
		t.Error("installed unit differs from manifests/agent/fleet-agent.service")
	}
	verifyInRoot(t, root, installFirstBootUnit)
	// Bad input is refused with the reason, and nothing is written.
	empty := filepath.Join(dir, "empty")
	out, err = exec.Command(bin, "install", "--root", empty, "--hub", "http://x").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "https://") {
		t.Errorf("bad hub accepted: %s", out)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Error("a refused install wrote files")
	}
	if out, err := exec.Command(bin, "uninstall", "--root", root, "--purge").CombinedOutput(); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{installBin, installConfig, installUnit, installEnabled, installFirstBootUnit, installFirstBootEnabled} {
		if _, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s survived uninstall", p)
		}
	}

	// Without hub and pin the configuration comes at first boot: no
	// config.yaml (the agent's unit waits for it), the first-boot unit on.
	later := filepath.Join(dir, "later")
	if out, err := exec.Command(bin, "install", "--root", later).CombinedOutput(); err != nil || !strings.Contains(string(out), "first boot") {
		t.Fatalf("install without hub: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(later, installConfig)); !os.IsNotExist(err) {
		t.Errorf("config.yaml written without a hub (%v)", err)
	}
	if _, err := os.Readlink(filepath.Join(later, installFirstBootEnabled)); err != nil {
		t.Errorf("first-boot unit not enabled: %v", err)
	}
	if out, err := exec.Command(bin, "install", "--root", filepath.Join(dir, "half"), "--hub", "https://hub.example.com").CombinedOutput(); err == nil {
		t.Errorf("a hub without a pin accepted: %s", out)
	}
}
