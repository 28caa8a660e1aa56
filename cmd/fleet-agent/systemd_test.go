package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Under systemd (Type=notify), fleet-agent says READY once its local state
// is loaded — without waiting for a hub that cannot be reached — tells what
// it is doing in STATUS, and pings the watchdog while its loop runs.
func TestAgentTellsSystemd(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fleet-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cmd := exec.Command(bin, "--config", filepath.Join(dir, "none.yaml"), "--hub", "https://127.0.0.1:1",
		"--ca-cert-hash", "sha256:"+strings.Repeat("0", 64), "--token", "abcdef.0123456789abcdef",
		"--state-dir", filepath.Join(dir, "state"), "--root-dir", dir)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=1000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()

	var got []string
	buf := make([]byte, 4096)
	deadline := time.Now().Add(30 * time.Second)
	has := func(prefix string) bool {
		for _, m := range got {
			if strings.HasPrefix(m, prefix) {
				return true
			}
		}
		return false
	}
	for time.Now().Before(deadline) && !(has("READY=1") && has("STATUS=disconnected") && has("WATCHDOG=1")) {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(buf); err == nil {
			got = append(got, string(buf[:n]))
		}
	}
	for _, want := range []string{"READY=1", "STATUS=disconnected", "WATCHDOG=1"} {
		if !has(want) {
			t.Errorf("systemd never got %s; got %q", want, got)
		}
	}
}
