package testhost

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bootScript runs as the box's PID 1 until it execs systemd. It mounts
// what a container manager gives a booted OS: /proc with /proc/sys
// read-only but for the network namespace's own settings; /sys read-only
// (so the box's udev stays out of the machine's devices) with every cgroup
// v1 hierarchy mounted writable at the box's cgroup namespace root; a /dev
// of its own with the console on a pseudo-terminal, and /dev/kmsg, which
// the kubelet's OOM watcher reads.
func (h *Host) bootScript(console string, binds map[string]string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	w("set -eu\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\nR=%s", h.Root(""))
	w("mount -t proc -o nosuid,nodev,noexec proc $R/proc")
	w("mount --bind $R/proc/sys $R/proc/sys && mount --bind $R/proc/sys/net $R/proc/sys/net")
	w("mount -o remount,bind,ro,nosuid,nodev,noexec $R/proc/sys")
	w("mount --bind $R/proc/sysrq-trigger $R/proc/sysrq-trigger && mount -o remount,bind,ro $R/proc/sysrq-trigger")
	// The kubelet insists on these machine-wide values: it finds them set.
	for _, k := range sortedKeys(sysctls) {
		w("mount --bind %s $R/proc/sys/%s", filepath.Join(h.Dir, "sysctl", strings.ReplaceAll(k, "/", ".")), k)
	}
	w("mount -t sysfs -o nosuid,nodev,noexec sysfs $R/sys")
	w("mount -t tmpfs -o nosuid,nodev,noexec,mode=755 tmpfs $R/sys/fs/cgroup")
	for _, m := range cgroupMounts() {
		if m.link != "" {
			w("ln -s %s $R/sys/fs/cgroup/%s", m.link, m.name)
			continue
		}
		w("mkdir $R/sys/fs/cgroup/%s && mount -t cgroup -o nosuid,nodev,noexec,%s cgroup $R/sys/fs/cgroup/%s", m.name, m.options, m.name)
	}
	w("mount -o remount,bind,ro,nosuid,nodev,noexec $R/sys")
	w("mount -t tmpfs -o nosuid,mode=755 tmpfs $R/dev")
	w("for d in null zero full random urandom tty kmsg; do touch $R/dev/$d && mount --bind /dev/$d $R/dev/$d; done")
	w("touch $R/dev/console && mount --bind %s $R/dev/console", console)
	w("mkdir $R/dev/pts $R/dev/shm && mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts $R/dev/pts")
	w("mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs $R/dev/shm")
	w("ln -s pts/ptmx $R/dev/ptmx && ln -s /proc/self/fd $R/dev/fd")
	w("ln -s /proc/self/fd/0 $R/dev/stdin && ln -s /proc/self/fd/1 $R/dev/stdout && ln -s /proc/self/fd/2 $R/dev/stderr")
	// containerd's snapshots are overlays, which cannot stack on the box's
	// overlay root: they get a directory of the machine's, as a data
	// partition would be.
	w("mkdir -p $R/var/lib/containerd && mount --bind %s $R/var/lib/containerd", filepath.Join(h.Dir, "containerd"))
	// What the kit puts over the image's own files (the agent under test,
	// staged versions), read-only as in a real image.
	for _, p := range sortedKeys(binds) {
		w("if [ -d %s ]; then mkdir -p $R/%s; else mkdir -p $R/%s && touch $R/%s; fi", binds[p], p, filepath.Dir(p), p)
		w("mount --bind %s $R/%s && mount -o remount,bind,ro $R/%s", binds[p], p, p)
	}
	w("hostname %s", h.Name)
	// pivot_root . . stacks the old root under the new one; detaching it
	// leaves the box nothing of the machine's file system.
	w("cd $R && pivot_root . . && umount -l . && cd /")
	w("exec env -i container=fleet-testhost /sbin/init </dev/console >/dev/console 2>&1")
	return b.String()
}

// A cgroupMount is one of the machine's cgroup v1 hierarchies (or a
// symlink to one, like cpu -> cpu,cpuacct), as the box mounts it.
type cgroupMount struct{ name, options, link string }

// cgroupMounts reads the machine's cgroup v1 mounts under /sys/fs/cgroup.
func cgroupMounts() []cgroupMount {
	var out []cgroupMount
	entries, _ := os.ReadDir(cgroupFS)
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if link, err := os.Readlink(p); err == nil {
			out = append(out, cgroupMount{name: e.Name(), link: link})
			continue
		}
		var st unix.Statfs_t
		if unix.Statfs(p, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		opts := e.Name()
		if opts == "systemd" || strings.HasPrefix(opts, "name=") {
			opts = "none,name=" + strings.TrimPrefix(opts, "name=")
		}
		out = append(out, cgroupMount{name: e.Name(), options: opts})
	}
	return out
}

// openConsole makes the pseudo-terminal that is the box's /dev/console.
func openConsole() (*os.File, string, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening a pseudo-terminal for the console: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("unlocking the console's pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		unix.Close(fd)
		return nil, "", fmt.Errorf("naming the console's pseudo-terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "console"), fmt.Sprintf("/dev/pts/%d", n), nil
}

// copyConsole appends what the box prints on console to path, one boot
// after another. A getty hanging up the terminal makes reads fail until
// it reopens it, so errors other than the master being closed are waited
// out, until the boot is done.
func copyConsole(console *os.File, path string, bootDone <-chan struct{}) {
	logf, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer logf.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := console.Read(buf)
		if n > 0 {
			_, _ = logf.Write(bytes.ReplaceAll(buf[:n], []byte("\r"), nil))
		}
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			select {
			case <-bootDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
