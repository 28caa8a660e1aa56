package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped unit passes systemd's own check (with ExecStart pointing at a
// real binary, which systemd-analyze requires).
func TestUnitFileVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (Debian package systemd; .ci/run installs it)")
		}
		t.Skip("systemd-analyze not installed")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "manifests", "agent", "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	text := strings.Replace(string(unit), "ExecStart=/usr/bin/fleet-agent", "ExecStart="+bin, 1)
	path := filepath.Join(dir, "fleet-agent.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify prints warnings about the host's other units too; only lines
	// about ours matter.
	var ours []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "fleet-agent.service") {
			ours = append(ours, line)
		}
	}
	if err != nil || len(ours) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(ours, "\n"))
	}
}

// verifyInRoot runs `systemd-analyze --root=ROOT verify` on the unit as it
// lies in an image root, so ExecStart= is checked against the tree's own
// binary. An image made by debootstrap has systemd's standard targets; a
// bare tree gets the host's copied in first.
func verifyInRoot(t *testing.T, root, unit string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (Debian package systemd; .ci/run installs it)")
		}
		t.Skip("systemd-analyze not installed")
	}
	dst := filepath.Join(root, "lib/systemd/system")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"*.target", "*.slice", "*.socket"} {
		matches, _ := filepath.Glob(filepath.Join("/lib/systemd/system", pattern))
		for _, m := range matches {
			if _, err := os.Stat(filepath.Join(dst, filepath.Base(m))); err == nil {
				continue
			}
			if b, err := os.ReadFile(m); err == nil {
				_ = os.WriteFile(filepath.Join(dst, filepath.Base(m)), b, 0o644)
			}
		}
	}
	if out, err := exec.Command(analyze, "--root="+root, "verify", filepath.Join(root, unit)).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze --root=%s verify %s: %v\n%s", root, unit, err, out)
	}
}
