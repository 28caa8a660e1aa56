package unitd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// eventually polls cond for up to 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

func lines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(string(b))
}

func newManager(t *testing.T, dir string) *Manager {
	t.Helper()
	m := New([]string{dir}, filepath.Join(dir, "log"), t.Logf)
	t.Cleanup(m.Shutdown)
	return m
}

// alive says whether pid runs (zombies, which nobody may reap here, do not).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

func TestRestartAlwaysRestartsAnExitedProcess(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "runs")
	write(t, filepath.Join(dir, "crash.service"), `[Service]
Environment=OUT=`+out+`
ExecStart=/bin/sh -c 'echo run >> "$OUT"; echo to the log; exit 3'
Restart=always
RestartSec=50ms
`)
	m := newManager(t, dir)
	if err := m.Start("crash.service"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "three runs", func() bool { return len(lines(out)) >= 3 })
	if err := m.Stop("crash.service"); err != nil {
		t.Fatal(err)
	}
	if st := m.Status("crash.service"); st.ActiveState != "inactive" || st.LoadState != "loaded" {
		t.Errorf("after stop: %+v", st)
	}
	n := len(lines(out))
	time.Sleep(300 * time.Millisecond) // six RestartSecs: a restart that survived the stop would show
	if len(lines(out)) != n {
		t.Errorf("runs went on after the stop: %d, then %d", n, len(lines(out)))
	}
	if log, _ := os.ReadFile(filepath.Join(dir, "log", "crash.service.log")); !strings.Contains(string(log), "to the log") {
		t.Errorf("unit log %q lacks the output", log)
	}
}

func TestRestartOnFailureStopsAfterCleanExit(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "runs")
	// Fails once, then exits 0: on-failure restarts once and leaves it.
	write(t, filepath.Join(dir, "once.service"), `[Service]
ExecStart=/bin/sh -c 'echo run >> `+out+`; test -e `+out+`.failed && exit 0; touch `+out+`.failed; exit 1'
Restart=on-failure
RestartSec=50ms
`)
	m := newManager(t, dir)
	if err := m.Start("once.service"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a clean exit", func() bool {
		return len(lines(out)) == 2 && m.Status("once.service").ActiveState == "inactive"
	})
}

func TestKillMode(t *testing.T) {
	for _, mode := range []string{"control-group", "process"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			childPid := filepath.Join(dir, "child")
			write(t, filepath.Join(dir, "k.service"), `[Service]
ExecStart=/bin/sh -c 'sleep 1000 & echo $! > `+childPid+`; exec sleep 1000'
KillMode=`+mode+`
TimeoutStopSec=10
`)
			m := newManager(t, dir)
			if err := m.Start("k.service"); err != nil {
				t.Fatal(err)
			}
			var child int
			eventually(t, "the child's pid", func() bool {
				child, _ = strconv.Atoi(strings.TrimSpace(string(must(os.ReadFile(childPid)))))
				return child > 0
			})
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			if err := m.Restart("k.service"); err != nil {
				t.Fatal(err)
			}
			if survived := alive(child); survived != (mode == "process") {
				t.Errorf("KillMode=%s: child alive after restart = %v", mode, survived)
			}
			// The restarted unit's child, in the new group, goes at shutdown whatever the mode.
			var second int
			eventually(t, "the second child's pid", func() bool {
				second, _ = strconv.Atoi(strings.TrimSpace(string(must(os.ReadFile(childPid)))))
				return second > 0 && second != child
			})
			m.Shutdown()
			if alive(second) {
				t.Errorf("KillMode=%s: the restarted unit's child %d outlived shutdown", mode, second)
				_ = syscall.Kill(second, syscall.SIGKILL)
			}
		})
	}
}

func must(b []byte, _ error) []byte { return b }

func TestStartFailuresAndShutdown(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "noexec.service"), "[Service]\nExecStart=/nonexistent/binary\n")
	write(t, filepath.Join(dir, "pre.service"), "[Service]\nExecStartPre=/bin/false\nExecStart=/bin/sleep 1000\n")
	write(t, filepath.Join(dir, "sleep.service"), "[Service]\nExecStartPre=-/bin/false\nExecStart=/bin/sleep 1000\n")
	m := newManager(t, dir)
	for _, u := range []string{"noexec.service", "pre.service", "missing.service"} {
		if err := m.Start(u); err == nil {
			t.Errorf("%s started", u)
		}
	}
	if st := m.Status("noexec.service"); st.ActiveState != "failed" {
		t.Errorf("noexec: %+v", st)
	}
	if st := m.Status("missing.service"); st.LoadState != "not-found" {
		t.Errorf("missing: %+v", st)
	}
	if err := m.Start("sleep.service"); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	pid := m.services["sleep.service"].main.Process.Pid
	m.mu.Unlock()
	m.Shutdown()
	if len(GroupMembers(pid)) != 0 {
		t.Errorf("processes %v left after shutdown", GroupMembers(pid))
	}
	if err := m.Start("sleep.service"); err == nil {
		t.Error("a start after shutdown")
	}
}
