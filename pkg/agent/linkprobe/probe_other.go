//go:build !linux

package linkprobe

import (
	"errors"
	"fmt"
	"runtime"
)

// Probe is never running on this platform: eBPF tracepoints are Linux-only.
type Probe struct{}

// Start always fails with ErrUnavailable outside Linux.
func Start(Options) (*Probe, error) {
	return nil, fmt.Errorf("%w: not supported on %s", ErrUnavailable, runtime.GOOS)
}

// Read always fails outside Linux.
func (*Probe) Read() (Counters, error) {
	return Counters{}, errors.New("linkprobe: not running")
}

// Attached is always empty outside Linux.
func (*Probe) Attached() []string { return nil }

// Close is a no-op outside Linux.
func (*Probe) Close() error { return nil }
