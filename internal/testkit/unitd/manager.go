package unitd

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrShutdown is returned for jobs asked of a Manager that is shutting down.
var ErrShutdown = errors.New("unitd is shutting down")

// Status is the state of one unit, as systemd's ListUnitsByNames reports it.
type Status struct {
	Name, Description string
	LoadState         string // loaded, not-found, bad-setting
	ActiveState       string // active, activating, deactivating, inactive, failed
	SubState          string // running, start, auto-restart, stop-sigterm, dead, failed
}

// Manager loads and runs service units.
type Manager struct {
	dirs   []string
	logDir string
	logf   func(format string, args ...any)

	mu       sync.Mutex
	services map[string]*service
	shutdown bool
}

// service is one unit's runtime state.
type service struct {
	name string
	// op holds one token for the job or auto-restart acting on the unit, so
	// those run one at a time.
	op chan struct{}

	// Guarded by Manager.mu.
	unit        *Unit // as loaded (Reload replaces it)
	loadErr     error
	active, sub string
	main        *exec.Cmd
	running     *Unit         // the definition main was started from
	pgid        int           // main's process group, kept after it exits
	exited      chan struct{} // closed once main is reaped
	stopping    bool
	gen         uint64 // bumped by every job: stale exits and auto-restarts step aside
	restart     *time.Timer
}

// New returns a Manager reading units from dirs (DefaultUnitDirs if none),
// appending each unit's output to <logDir>/<unit>.log and reporting what it
// does through logf.
func New(dirs []string, logDir string, logf func(format string, args ...any)) *Manager {
	if len(dirs) == 0 {
		dirs = DefaultUnitDirs
	}
	return &Manager{dirs: dirs, logDir: logDir, logf: logf, services: map[string]*service{}}
}

// lookup returns the unit's state, loading its files the first time (and
// again while it is not found, as systemd loads a unit on each reference).
func (m *Manager) lookup(name string) *service {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.services[name]
	if s == nil {
		s = &service{name: name, op: make(chan struct{}, 1), active: "inactive", sub: "dead"}
		m.services[name] = s
	}
	if s.unit == nil {
		s.unit, s.loadErr = Load(m.dirs, name)
	}
	return s
}

// Status reports a unit.
func (m *Manager) Status(name string) Status {
	s := m.lookup(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Name: name, ActiveState: s.active, SubState: s.sub, LoadState: "loaded"}
	switch {
	case s.unit != nil:
		st.Description = s.unit.Description
	case errors.Is(s.loadErr, ErrNotFound):
		st.LoadState = "not-found"
	default:
		st.LoadState = "bad-setting"
	}
	return st
}

// LoadError is why the unit could not be loaded (wrapping ErrNotFound
// when no directory holds it), or nil.
func (m *Manager) LoadError(name string) error {
	s := m.lookup(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	return s.loadErr
}

// Reload re-reads the files of every unit seen so far; the next start of
// each uses them (what runs keeps running), as `systemctl daemon-reload`.
func (m *Manager) Reload() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, s := range m.services {
		s.unit, s.loadErr = Load(m.dirs, name)
		if s.loadErr != nil && !errors.Is(s.loadErr, ErrNotFound) {
			m.logf("reload: %v", s.loadErr)
		}
	}
	m.logf("reloaded unit files")
}

// Start starts the unit unless it runs; it returns once the main process
// is exec'd (every Type counts as started then) or the start failed.
func (m *Manager) Start(name string) error { return m.job(name, false, true) }

// Stop stops the unit: SIGTERM, then SIGKILL after TimeoutStopSec, to the
// main process's group (KillMode=control-group) or the main process alone
// (KillMode=process).
func (m *Manager) Stop(name string) error { return m.job(name, true, false) }

// Restart stops the unit if it runs, then starts it.
func (m *Manager) Restart(name string) error { return m.job(name, true, true) }

func (m *Manager) job(name string, stop, start bool) error {
	s := m.lookup(name)
	m.mu.Lock()
	loadErr, shutdown := s.loadErr, m.shutdown
	m.mu.Unlock()
	if shutdown && start {
		return ErrShutdown
	}
	if start && loadErr != nil {
		return loadErr
	}
	s.op <- struct{}{}
	defer func() { <-s.op }()
	m.mu.Lock()
	if m.shutdown && start {
		// Shutdown began while this job waited for the unit.
		m.mu.Unlock()
		return ErrShutdown
	}
	s.gen++
	if s.restart != nil {
		s.restart.Stop()
		s.restart = nil
		if s.active == "activating" {
			s.active, s.sub = "inactive", "dead" // a pending auto-restart is cancelled
		}
	}
	running := s.main != nil
	m.mu.Unlock()
	if stop {
		m.stop(s)
	}
	if start && (stop || !running) {
		return m.start(s)
	}
	return nil
}

// start runs ExecStartPre= and execs ExecStart=; a failure counts as a
// failed run for Restart=. Callers hold s.op.
func (m *Manager) start(s *service) error {
	m.mu.Lock()
	u, loadErr := s.unit, s.loadErr
	s.active, s.sub = "activating", "start"
	m.mu.Unlock()
	err := loadErr
	if err == nil {
		err = m.launch(s, u)
	}
	if err != nil {
		m.logf("%s: failed to start: %v", s.name, err)
		m.mu.Lock()
		s.active, s.sub = "failed", "failed"
		m.scheduleRestart(s, u, false)
		m.mu.Unlock()
		return fmt.Errorf("starting %s: %w", s.name, err)
	}
	return nil
}

func (m *Manager) launch(s *service, u *Unit) error {
	env, err := u.Env()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.logDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(m.logDir, u.Name+".log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the children hold their own copies
	for _, pre := range u.ExecStartPre {
		cmd, err := command(pre, env, logFile)
		if err == nil {
			err = cmd.Run()
		}
		if err != nil && !pre.IgnoreFailure {
			return fmt.Errorf("ExecStartPre=%s: %w", strings.Join(pre.Words, " "), err)
		}
	}
	cmd, err := command(u.ExecStart[0], env, logFile)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Fprintf(logFile, "-- unitd: started %s, pid %d: %s\n", u.Name, cmd.Process.Pid, strings.Join(cmd.Args, " "))
	exited := make(chan struct{})
	m.mu.Lock()
	s.main, s.running, s.exited, s.stopping, s.pgid = cmd, u, exited, false, cmd.Process.Pid
	s.active, s.sub = "active", "running"
	gen := s.gen
	m.mu.Unlock()
	m.logf("%s: started pid %d: %s", u.Name, cmd.Process.Pid, strings.Join(cmd.Args, " "))
	go m.wait(s, u, cmd, exited, gen)
	return nil
}

// command makes the process of one Exec*= line: its own process group
// (the stand-in for the unit's cgroup), stdin /dev/null, output to the log.
func command(c Command, env map[string]string, out *os.File) (*exec.Cmd, error) {
	argv := Expand(c.Words, env)
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%q expands to no executable", strings.Join(c.Words, " "))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	slices.Sort(cmd.Env)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// wait reaps the main process and, when no stop asked for its end, applies
// the kill mode and Restart= policy.
func (m *Manager) wait(s *service, u *Unit, cmd *exec.Cmd, exited chan struct{}, gen uint64) {
	_ = cmd.Wait()
	m.mu.Lock()
	s.main = nil
	stopping := s.stopping
	m.mu.Unlock()
	close(exited)
	if stopping {
		return
	}
	clean := cleanExit(cmd.ProcessState) || u.ExecStart[0].IgnoreFailure
	m.logf("%s: main process %d exited, %s", u.Name, cmd.Process.Pid, describe(cmd.ProcessState))
	if u.KillMode == "control-group" {
		m.killGroup(u.Name, cmd.Process.Pid, u.StopTimeout)
	}
	s.op <- struct{}{}
	defer func() { <-s.op }()
	m.mu.Lock()
	stale := s.gen != gen
	m.mu.Unlock()
	if stale {
		return // a job has taken over the unit
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if clean {
		s.active, s.sub = "inactive", "dead"
	} else {
		s.active, s.sub = "failed", "failed"
	}
	m.scheduleRestart(s, u, clean)
}

// cleanExit is systemd's notion for Restart=on-failure: status 0 or one of
// the signals a stop sends.
func cleanExit(ps *os.ProcessState) bool {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return slices.Contains([]syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGPIPE}, ws.Signal())
	}
	return ps.Success()
}

func describe(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by signal " + ws.Signal().String()
	}
	return "status " + strconv.Itoa(ps.ExitCode())
}

// scheduleRestart arms the auto-restart Restart= calls for. Callers hold m.mu.
func (m *Manager) scheduleRestart(s *service, u *Unit, clean bool) {
	if m.shutdown || u == nil || !(u.Restart == "always" || u.Restart == "on-failure" && !clean) {
		return
	}
	gen := s.gen
	s.active, s.sub = "activating", "auto-restart"
	s.restart = time.AfterFunc(u.RestartDelay, func() {
		s.op <- struct{}{}
		defer func() { <-s.op }()
		m.mu.Lock()
		if s.gen != gen || m.shutdown {
			m.mu.Unlock()
			return
		}
		s.gen++
		s.restart = nil
		m.mu.Unlock()
		m.logf("%s: restarting (Restart=%s, RestartSec=%s)", u.Name, u.Restart, u.RestartDelay)
		_ = m.start(s)
	})
}

// stop ends the main process as KillMode= says. Callers hold s.op.
func (m *Manager) stop(s *service) {
	m.mu.Lock()
	cmd, u, exited := s.main, s.running, s.exited
	if cmd == nil {
		s.active, s.sub = "inactive", "dead"
		m.mu.Unlock()
		return
	}
	s.stopping = true
	s.active, s.sub = "deactivating", "stop-sigterm"
	m.mu.Unlock()
	pid := cmd.Process.Pid
	signal := func(sig syscall.Signal) {
		if u.KillMode == "control-group" {
			_ = syscall.Kill(-pid, sig)
		} else {
			_ = cmd.Process.Signal(sig)
		}
	}
	m.logf("%s: stopping pid %d (KillMode=%s)", u.Name, pid, u.KillMode)
	deadline := time.Now().Add(u.StopTimeout)
	signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(u.StopTimeout):
		m.logf("%s: pid %d still there after TimeoutStopSec=%s, sending SIGKILL", u.Name, pid, u.StopTimeout)
		signal(syscall.SIGKILL)
		<-exited
	}
	if u.KillMode == "control-group" {
		m.killGroup(u.Name, pid, time.Until(deadline))
	}
	m.logf("%s: stopped, main process %d %s", u.Name, pid, describe(cmd.ProcessState))
	m.mu.Lock()
	s.active, s.sub = "inactive", "dead"
	m.mu.Unlock()
}

// killGroup ends what is left of process group pgid once its leader is
// gone: SIGTERM, then SIGKILL when grace runs out.
func (m *Manager) killGroup(name string, pgid int, grace time.Duration) {
	if len(GroupMembers(pgid)) == 0 {
		return
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for len(GroupMembers(pgid)) > 0 {
		if time.Now().After(deadline) {
			m.logf("%s: processes %v of group %d outlived SIGTERM, sending SIGKILL", name, GroupMembers(pgid), pgid)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// GroupMembers lists the live (not zombie) processes of process group
// pgid that share unitd's cgroups. Orphans are reparented to a PID 1 that
// need not reap them, so kill(-pgid, 0) alone would count zombies as
// alive; and a group number the machine has since given to a process
// outside this host is not this unit's.
func GroupMembers(pgid int) []int {
	own, _ := os.ReadFile("/proc/self/cgroup")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[2] != strconv.Itoa(pgid) {
			continue
		}
		if cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup"); err == nil && bytes.Equal(cg, own) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Shutdown stops every running unit (in parallel), then ends what is
// left in their process groups whatever their KillMode (systemd's final
// kill at power-off), and refuses further starts and auto-restarts.
func (m *Manager) Shutdown() {
	m.mu.Lock()
	m.shutdown = true
	services := slices.Collect(maps.Values(m.services))
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range services {
		wg.Go(func() {
			_ = m.Stop(s.name)
			m.mu.Lock()
			pgid, u := s.pgid, s.running
			m.mu.Unlock()
			if pgid != 0 {
				m.killGroup(s.name, pgid, u.StopTimeout)
			}
		})
	}
	wg.Wait()
}
