package load

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcessCPU is the CPU time (user + system) process pid has used.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) start after ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	// USER_HZ is 100 on Linux.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// CPUByProgram is the CPU time used so far by the processes running each
// of programs (matched by executable name), and by this process under
// "driver": what shares the machine's cores during a benchmark.
func CPUByProgram(programs ...string) map[string]time.Duration {
	out := map[string]time.Duration{}
	if d, err := ProcessCPU(os.Getpid()); err == nil {
		out["driver"] = d
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		for _, p := range programs {
			if filepath.Base(exe) == p {
				if d, err := ProcessCPU(pid); err == nil {
					out[p] += d
				}
			}
		}
	}
	return out
}
