package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
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
	out := newTail(r.OutputLimit)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s: %w", timeout, err)
	}
	return out.Bytes(), err
}

// tail keeps the last n bytes written to it.
type tail struct {
	mu    sync.Mutex
	n     int
	buf   []byte
	total int
}

func newTail(n int) *tail {
	if n <= 0 {
		n = 8 << 10
	}
	return &tail{n: n}
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += len(p)
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.n:]...)
	}
	return len(p), nil
}

// Bytes is the kept tail, marked when earlier output was dropped.
func (t *tail) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.total > len(t.buf) {
		return append([]byte(fmt.Sprintf("[… %d earlier bytes dropped …]\n", t.total-len(t.buf))), t.buf...)
	}
	return append([]byte(nil), t.buf...)
}
