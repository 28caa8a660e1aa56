package progress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// interval is how often Until looks again: often enough for a person
// watching, rare enough for an API server serving a fleet of operators.
var interval = time.Second

// lookGrace is how long a look may outlast the wait's timeout.
const lookGrace = 10 * time.Second

// Check says where the work stands: a line for the operator, and whether
// the work is done. An error ends the wait.
type Check func(ctx context.Context) (line string, done bool, err error)

// Until runs check until it reports done, printing its line to out each
// time the line changes. It gives up after timeout, or when ctx ends, with
// an error that names what it waited for and the last line.
func Until(ctx context.Context, out io.Writer, timeout time.Duration, what string, check Check) error {
	// A look gets a little longer than the wait: with the wait's own
	// deadline, a request that would end past it fails with the client's
	// rate limiter's error instead of the wait saying it timed out.
	checkCtx, cancelChecks := context.WithTimeout(ctx, timeout+lookGrace)
	defer cancelChecks()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		line, done, err := check(checkCtx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil && line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		if err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			return stopped(ctx, timeout, what, last)
		case <-time.After(interval):
		}
	}
}

// stopped says why Until stopped before the work was done.
func stopped(ctx context.Context, timeout time.Duration, what, last string) error {
	msg := "interrupted waiting for " + what
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("timed out waiting for %s (--timeout %s)", what, timeout)
	}
	if last == "" {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %s", msg, last)
}
