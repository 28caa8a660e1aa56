package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

// Runner runs one bootstrap command and returns its combined output (a
// bounded tail of it).
type Runner interface {
	Run(ctx context.Context, c cloudconfig.Command) (output []byte, err error)
}

// ShellRunner runs commands on this machine: a shell line with /bin/sh -c,
// a list directly, as cloud-init does.
type ShellRunner struct {
	// Dir is the working directory.
	Dir string
	// Env is added to the agent's environment.
	Env []string
	// Timeout bounds one command (default 30 minutes: kubeadm pulls images).
	Timeout time.Duration
	// OutputLimit is how much of the output tail is kept (default 8 KiB).
	OutputLimit int
}

// Run runs c.
func (r ShellRunner) Run(ctx context.Context, c cloudconfig.Command) ([]byte, error) {
	return r.RunTo(ctx, c, nil)
}

// RunTo runs c and copies its whole output to w.
func (r ShellRunner) RunTo(ctx context.Context, c cloudconfig.Command, w io.Writer) ([]byte, error) {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cmd *exec.Cmd
	if c.Argv != nil {
		cmd = exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	} else {
		cmd = exec.CommandContext(ctx, "/bin/sh", "-c", c.Shell)
	}
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), r.Env...)
	return runGroup(ctx, cmd, r.OutputLimit, timeout, w)
}

// runGroup runs cmd in its own process group, killing the whole group when
// ctx ends (kubeadm's children too), with its output going to a file rather
// than a pipe, so a daemon a command leaves running cannot hold the step
// open. It returns the last limit bytes of the output, and copies all of
// it to w (when not nil).
func runGroup(ctx context.Context, cmd *exec.Cmd, limit int, timeout time.Duration, w io.Writer) ([]byte, error) {
	out, err := os.CreateTemp("", "fleet-cmd-*.log")
	if err != nil {
		return nil, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		runErr = fmt.Errorf("timed out after %s: %w", timeout, runErr)
	} else if ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted: %w", ctx.Err())
	}
	tail := readTail(out, limit)
	copyOutput(out, w)
	return tail, runErr
}

// readTail reads the last limit bytes of f, marking what was dropped.
func readTail(f *os.File, limit int) []byte {
	if limit <= 0 {
		limit = 8 << 10
	}
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	size := fi.Size()
	start := max(size-int64(limit), 0)
	buf := make([]byte, size-start)
	n, _ := f.ReadAt(buf, start)
	buf = buf[:n]
	if start > 0 {
		return append([]byte(fmt.Sprintf("[… %d earlier bytes dropped …]\n", start)), buf...)
	}
	return buf
}
