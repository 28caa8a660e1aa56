package testhost

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RecordDir holds one record per live site and host, so that what a killed
// run left behind can be found and removed.
const RecordDir = "/run/fleet-testhost"

// recordDir is RecordDir; tests of the records use their own.
var recordDir = RecordDir

// cgroupFS is where the machine's cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// Record is what a site or host made on the machine.
type Record struct {
	Kind  string `json:"kind"` // "site" or "host"
	Name  string `json:"name"`
	Owner int    `json:"owner"` // the pid of the process that made it
	// OwnerStart is when Owner started (clock ticks since boot), so a pid
	// the machine has given to another process is not taken for the maker.
	OwnerStart uint64 `json:"ownerStart"`
	NetNS      string `json:"netns,omitempty"`
	// Cgroup is the host's cgroup parent, in every hierarchy.
	Cgroup string `json:"cgroup,omitempty"`
	// Dir is the host's state on the machine, removed with it.
	Dir string `json:"dir,omitempty"`
}

func recordPath(kind, name string) string { return filepath.Join(recordDir, kind+"-"+name+".json") }

// record notes what r names, refusing when a live run holds a record of
// the same kind and name: its site or host must not be taken over.
func record(r Record) error {
	if old, err := readRecord(recordPath(r.Kind, r.Name)); err == nil && old.alive() && old.Owner != os.Getpid() {
		return fmt.Errorf("%s %s belongs to a run that is still going (pid %d)", r.Kind, r.Name, old.Owner)
	}
	r.Owner, r.OwnerStart = os.Getpid(), startTime(os.Getpid())
	if err := os.MkdirAll(recordDir, 0o700); err != nil {
		return fmt.Errorf("recording %s %s: %w", r.Kind, r.Name, err)
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(recordPath(r.Kind, r.Name), b, 0o600); err != nil {
		return fmt.Errorf("recording %s %s: %w", r.Kind, r.Name, err)
	}
	return nil
}

func readRecord(path string) (Record, error) {
	var r Record
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	return r, err
}

// check refuses a record that names anything but what a site or host of
// its name makes: Sweep kills and deletes what a record names.
func (r Record) check() error {
	if err := checkName(r.Name); err != nil {
		return err
	}
	switch {
	case r.Kind == "site" && r.NetNS == r.Name && r.Cgroup == "" && r.Dir == "":
		return nil
	case r.Kind == "host" && r.NetNS == "fleet-"+r.Name && r.Cgroup == "/fleet-"+r.Name &&
		filepath.IsAbs(r.Dir) && filepath.Clean(r.Dir) == r.Dir && filepath.Base(r.Dir) == r.Name && r.Dir != "/"+r.Name:
		return nil
	}
	return fmt.Errorf("record of %s %s names what no site or host makes (%+v)", r.Kind, r.Name, r)
}

func forget(kind, name string) error {
	if err := os.Remove(recordPath(kind, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("forgetting %s %s: %w", kind, name, err)
	}
	return nil
}

// Sweep removes every site and host whose maker is no longer running (a
// run killed before it cleaned up) and returns one line per thing removed.
func Sweep() ([]string, error) {
	entries, err := os.ReadDir(recordDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", recordDir, err)
	}
	var recs []Record
	var errs []error
	for _, e := range entries {
		r, err := readRecord(filepath.Join(recordDir, e.Name()))
		if err != nil || r.alive() {
			continue
		}
		if err := r.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w; left alone", e.Name(), err))
			continue
		}
		recs = append(recs, r)
	}
	// Hosts before the sites their links hang off.
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Kind == "host" && recs[j].Kind != "host" })
	var done []string
	for _, r := range recs {
		if err := r.remove(); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, fmt.Sprintf("removed %s %s left by pid %d", r.Kind, r.Name, r.Owner))
	}
	return done, errors.Join(errs...)
}

// remove undoes everything the record names: processes (by cgroup and by
// network namespace), cgroups, the namespace, the state directory.
func (r Record) remove() error {
	var errs []error
	if r.Cgroup != "" {
		errs = append(errs, removeCgroup(r.Cgroup))
	}
	if r.NetNS != "" {
		killNetNS(r.NetNS)
		if out, err := exec.Command("ip", "netns", "del", r.NetNS).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", r.NetNS, err, strings.TrimSpace(string(out))))
		}
	}
	if r.Dir != "" {
		unmountUnder(r.Dir)
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", r.Dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing %s %s: %w", r.Kind, r.Name, err)
	}
	return forget(r.Kind, r.Name)
}

// alive tells whether the record's maker still runs: its pid, started
// when the record says.
func (r Record) alive() bool {
	if r.Owner <= 0 {
		return false
	}
	if err := syscall.Kill(r.Owner, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	return r.OwnerStart == 0 || startTime(r.Owner) == r.OwnerStart
}

// startTime is when pid started, in clock ticks since boot (0 if unknown).
func startTime(pid int) uint64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid … starttime is the 22nd field; comm may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0
	}
	t, _ := strconv.ParseUint(f[19], 10, 64)
	return t
}

// hierarchies lists the machine's cgroup mounts (v1 hierarchies and the v2
// "unified" one).
func hierarchies() []string {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

// removeCgroup kills every process under the cgroup in any hierarchy until
// none is left, then removes its directories, deepest first.
func removeCgroup(cg string) error {
	for i := 0; ; i++ {
		pids := cgroupPids(cg)
		if len(pids) == 0 {
			break
		}
		if i == 100 {
			return fmt.Errorf("cgroup %s: processes %v outlive SIGKILL", cg, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var errs []error
	for _, h := range hierarchies() {
		root := filepath.Join(h, cg)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupPids is every process in the cgroup or below it, in any hierarchy.
func cgroupPids(cg string) []int {
	seen := map[int]bool{}
	for _, h := range hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, cg), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// killNetNS kills whatever still runs in a network namespace.
func killNetNS(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches anything the machine has mounted inside dir.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// Owner is the pid of the running process that holds the site or host
// (kind "site" or "host") of that name, or 0 when none does.
func Owner(kind, name string) int {
	r, err := readRecord(recordPath(kind, name))
	if err != nil || !r.alive() {
		return 0
	}
	return r.Owner
}
