package localkube

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Processes returns the pids of running processes whose command line
// names a path inside dir: the etcd and API server of a server on dir, or
// anything else started with paths there (the demo's agents).
func Processes(dir string) ([]int, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	needle := []byte(dir)
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone already
		}
		if names(cmdline, needle) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// names reports whether a NUL-separated command line holds path, or a
// path under it, as a whole argument or flag value (so /x/etcd does not
// match /x/etcd2 or /y/x/etcd).
func names(cmdline, path []byte) bool {
	for i := 0; ; {
		j := bytes.Index(cmdline[i:], path)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(path)
		startsArg := start == 0 || cmdline[start-1] == 0 || cmdline[start-1] == '='
		if startsArg && (end == len(cmdline) || cmdline[end] == 0 || cmdline[end] == '/') {
			return true
		}
		i = end
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// StopLeftovers stops etcd and kube-apiserver processes that a killed run
// left on dir: SIGTERM, then SIGKILL after grace.
func StopLeftovers(dir string, grace time.Duration) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	pids, err := Processes(filepath.Join(abs, "etcd"))
	if err != nil {
		return err
	}
	more, err := Processes(filepath.Join(abs, "apiserver"))
	if err != nil {
		return err
	}
	pids = append(pids, more...)
	// Only etcd and kube-apiserver: never something else that merely names
	// the directory.
	var ours []int
	for _, pid := range pids {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
		if b := filepath.Base(exe); err == nil && (b == "etcd" || b == "kube-apiserver") {
			ours = append(ours, pid)
		}
	}
	pids = ours
	if len(pids) == 0 {
		return nil
	}
	fmt.Fprintf(os.Stderr, "stopping %d process(es) left on %s by an earlier run that did not shut down: %v\n", len(pids), abs, pids)
	return Kill(pids, grace)
}

// Kill sends SIGTERM to pids and SIGKILL to those still alive after grace.
func Kill(pids []int, grace time.Duration) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && !zombie(pid)
}
