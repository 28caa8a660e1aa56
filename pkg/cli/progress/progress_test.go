package progress

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The --wait progress line says what there is, also before any Machine.
func TestMachinesLine(t *testing.T) {
	for _, tc := range []struct {
		running, want int
		phases        map[string]int
		line          string
	}{
		{0, 3, nil, "machines: 0/3 Running (no Machines yet)"},
		{1, 3, map[string]int{"Running": 1, "Provisioning": 2}, "machines: 1/3 Running (1 Running, 2 Provisioning)"},
	} {
		if got := MachinesLine(tc.running, tc.want, tc.phases); got != tc.line {
			t.Errorf("MachinesLine = %q, want %q", got, tc.line)
		}
	}
}

// A line is printed when it changes, not on every look; the wait ends when
// the check says done.
func TestUntilPrintsChanges(t *testing.T) {
	interval = time.Millisecond
	defer func() { interval = time.Second }()
	lines := []string{"a", "a", "b", "b", "c"}
	n := 0
	var out bytes.Buffer
	err := Until(context.Background(), &out, time.Minute, "x", func(context.Context) (string, bool, error) {
		l := lines[n]
		n++
		return l, n == len(lines), nil
	})
	if err != nil || out.String() != "a\nb\nc\n" {
		t.Fatalf("Until: %v, printed %q", err, out.String())
	}
}

// Giving up says whether the timeout or the operator ended the wait, what
// was waited for and where it stood.
func TestUntilSaysWhyItStopped(t *testing.T) {
	never := func(context.Context) (string, bool, error) { return "machines: 0/1 Running", false, nil }
	err := Until(context.Background(), &bytes.Buffer{}, time.Nanosecond, "cluster shop", never)
	if err == nil || err.Error() != "timed out waiting for cluster shop (--timeout 1ns): machines: 0/1 Running" {
		t.Errorf("timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Until(ctx, &bytes.Buffer{}, time.Minute, "cluster shop", never)
	if err == nil || !strings.HasPrefix(err.Error(), "interrupted waiting for cluster shop: ") {
		t.Errorf("interrupt: %v", err)
	}
}

// A look near the end of the wait is not refused for the wait's deadline
// (as a client's rate limiter refuses a request that would end past its
// context's): the wait says it timed out, not the limiter's error.
func TestUntilTimesOutRatherThanFailAtTheDeadline(t *testing.T) {
	interval = 10 * time.Millisecond
	defer func() { interval = time.Second }()
	err := Until(context.Background(), &bytes.Buffer{}, 300*time.Millisecond, "x", func(ctx context.Context) (string, bool, error) {
		if d, ok := ctx.Deadline(); ok && time.Until(d) < 200*time.Millisecond {
			return "", false, errors.New("rate: Wait(n=1) would exceed context deadline")
		}
		return "waiting", false, nil
	})
	if err == nil || !strings.HasPrefix(err.Error(), "timed out waiting for x (--timeout 300ms): waiting") {
		t.Fatalf("Until = %v, want the timeout", err)
	}
}
