package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

// ChrootRunner runs each command chrooted into a sandbox root, inside a
// private mount namespace where the machine's /usr, /bin, /sbin, /lib and
// /lib64 are bind-mounted read-only. A bootstrap's absolute paths
// (/run/kubeadm/…, /etc/kubernetes/…) then land in the sandbox, and
// nothing it does outlives the command. Tests and the local demo use it;
// it needs root and util-linux's unshare.
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
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", sandboxScript)
	cmd.Env = append([]string{"PATH=" + path, "HOME=/root", "LANG=C.UTF-8",
		"FLEET_SANDBOX_ROOT=" + r.Root, "FLEET_SANDBOX_CMD=" + line}, r.Env...)
	out := newTail(r.OutputLimit)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	return out.Bytes(), err
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
