package provision

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

// ChrootRunner runs each command chrooted into a sandbox root, inside
// private mount and PID namespaces where the machine's /usr, /bin, /sbin,
// /lib and /lib64 are bind-mounted read-only. A bootstrap's absolute paths
// (/run/kubeadm/…, /etc/kubernetes/…) then land in the sandbox, and every
// process it starts ends with the command. Tests and the local demo use it;
// it needs root and util-linux's unshare.
//
// It keeps well-behaved bootstrap data in its sandbox. It is NOT a security
// boundary: the command runs as root with all capabilities (it could
// remount /usr read-write, or use /dev). Run only bootstrap data you trust
// with it, as on a real host.
type ChrootRunner struct {
	// Root is the sandbox root.
	Root string
	// Path is put in front of PATH inside the sandbox (e.g. where the node
	// simulator's kubeadm lives, relative to the sandbox root).
	Path string
	// Env is added to the command's environment.
	Env []string
	// Timeout bounds one command (default 10 minutes).
	Timeout time.Duration
	// OutputLimit is how much of the output tail is kept (default 8 KiB).
	OutputLimit int
}

// sandboxScript sets up the namespace's mounts and execs the command.
const sandboxScript = `set -e
R="$FLEET_SANDBOX_ROOT"
for d in dev proc tmp; do
  if [ -L "$R/$d" ]; then echo "sandbox: $R/$d is a symlink; refusing" >&2; exit 97; fi
done
for d in usr bin sbin lib lib64; do
  if [ -L "/$d" ]; then
    [ -e "$R/$d" ] || [ -L "$R/$d" ] || ln -s "$(readlink "/$d")" "$R/$d"
  elif [ -d "/$d" ]; then
    mkdir -p "$R/$d"
    mount --bind "/$d" "$R/$d"
    mount -o remount,bind,ro "$R/$d"
  fi
done
mkdir -p "$R/dev" "$R/proc" "$R/tmp"
mount --rbind /dev "$R/dev"
mount -t proc proc "$R/proc"
exec chroot "$R" /bin/sh -c "$FLEET_SANDBOX_CMD"
`

// Run runs c in the sandbox.
func (r ChrootRunner) Run(ctx context.Context, c cloudconfig.Command) ([]byte, error) {
	return r.RunTo(ctx, c, nil)
}

// RunTo runs c in the sandbox and copies its whole output to w.
func (r ChrootRunner) RunTo(ctx context.Context, c cloudconfig.Command, w io.Writer) ([]byte, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the sandbox runner needs root (mount namespaces and chroot)")
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	line := c.Shell
	if c.Argv != nil {
		quoted := make([]string, len(c.Argv))
		for i, a := range c.Argv {
			quoted[i] = shellQuote(a)
		}
		line = strings.Join(quoted, " ")
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	if r.Path != "" {
		path = r.Path + ":" + path
	}
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
		"/bin/sh", "-c", sandboxScript)
	cmd.Env = append([]string{"PATH=" + path, "HOME=/root", "LANG=C.UTF-8",
		"FLEET_SANDBOX_ROOT=" + r.Root, "FLEET_SANDBOX_CMD=" + line}, r.Env...)
	return runGroup(ctx, cmd, r.OutputLimit, timeout, w)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
