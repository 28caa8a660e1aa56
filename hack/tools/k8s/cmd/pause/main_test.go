package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// pause keeps running until SIGTERM, then exits 0.
func TestPauseStopsOnSIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause exited on its own: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("pause exited with %v after SIGTERM, want status 0", err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause still runs 10s after SIGTERM")
	}
}

// reapZombies collects an exited child nobody waits for.
func TestReapZombies(t *testing.T) {
	child := exec.Command("true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	stat := "/proc/" + strconv.Itoa(pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		reapZombies()
		if _, err := os.Stat(stat); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d was not reaped", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pause -v prints a version and exits 0, as kubeadm's upgrade health check
// expects of the pause image.
func TestPauseVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-v").CombinedOutput()
	if err != nil || len(out) == 0 {
		t.Fatalf("pause -v: %v, %q", err, out)
	}
}
