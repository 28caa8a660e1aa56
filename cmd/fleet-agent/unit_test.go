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
