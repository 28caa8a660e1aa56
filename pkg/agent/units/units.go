package units

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// ErrNoDBus wraps every reason systemd cannot be reached.
var ErrNoDBus = errors.New("systemd's D-Bus API is not reachable")

// watched maps file locations to the unit that reads them.
var watched = []struct{ prefix, unit string }{
	{"/etc/containerd/", "containerd.service"},
	{"/etc/systemd/system/containerd.service.d/", "containerd.service"},
	{"/etc/systemd/system/kubelet.service.d/", "kubelet.service"},
	{"/usr/lib/systemd/system/kubelet.service.d/", "kubelet.service"},
	{"/etc/default/kubelet", "kubelet.service"},
	{"/etc/sysconfig/kubelet", "kubelet.service"},
}

// Plan is what the written files call for.
type Plan struct {
	// Reload: unit files or drop-ins changed (systemctl daemon-reload).
	Reload bool
	// Units to restart, in order (containerd before the kubelet).
	Units []string
}

// PlanFor decides from the paths a bootstrap wrote.
func PlanFor(written []string) Plan {
	var p Plan
	set := map[string]bool{}
	for _, w := range written {
		w = path.Clean(w)
		if strings.HasPrefix(w, "/etc/systemd/") || strings.HasPrefix(w, "/usr/lib/systemd/") {
			p.Reload = true
		}
		for _, x := range watched {
			// Folders match what is under them, files only themselves.
			if strings.HasSuffix(x.prefix, "/") && strings.HasPrefix(w, x.prefix) || w == x.prefix {
				set[x.unit] = true
			}
		}
	}
	for u := range set {
		p.Units = append(p.Units, u)
	}
	sort.Strings(p.Units) // containerd.service < kubelet.service
	return p
}

// Restarter talks to systemd.
type Restarter struct {
	// Dial connects to systemd; default the system bus.
	Dial func(ctx context.Context) (*sddbus.Conn, error)
	// Timeout bounds each restart job (default 2 minutes).
	Timeout time.Duration
}

// Apply carries out the plan and returns one line per unit
// ("containerd.service restarted", "kubelet.service not installed").
// Restarting a unit that is not running starts it: that is what systemctl
// restart does, and what a bootstrap that configured it wants.
func (r Restarter) Apply(ctx context.Context, p Plan) ([]string, error) {
	if !p.Reload && len(p.Units) == 0 {
		return nil, nil
	}
	dial := r.Dial
	if dial == nil {
		dial = sddbus.NewSystemConnectionContext
	}
	conn, err := dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (%v): not restarting %s; the bootstrap's own commands must", ErrNoDBus, err, strings.Join(p.Units, ", "))
	}
	defer conn.Close()
	var report []string
	if p.Reload {
		if err := conn.ReloadContext(ctx); err != nil {
			return report, fmt.Errorf("reloading systemd's unit files: %w", err)
		}
		report = append(report, "systemd unit files reloaded")
	}
	if len(p.Units) == 0 {
		return report, nil
	}
	statuses, err := conn.ListUnitsByNamesContext(ctx, p.Units)
	if err != nil {
		return report, fmt.Errorf("looking up %s: %w", strings.Join(p.Units, ", "), err)
	}
	loaded := map[string]bool{}
	for _, s := range statuses {
		loaded[s.Name] = s.LoadState == "loaded"
	}
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	var errs []error
	for _, u := range p.Units {
		if !loaded[u] {
			report = append(report, u+" not installed")
			continue
		}
		done := make(chan string, 1)
		if _, err := conn.RestartUnitContext(ctx, u, "replace", done); err != nil {
			errs = append(errs, fmt.Errorf("restarting %s: %w", u, err))
			continue
		}
		select {
		case res := <-done:
			if res != "done" {
				errs = append(errs, fmt.Errorf("restarting %s: job %s", u, res))
				continue
			}
			report = append(report, u+" restarted")
		case <-time.After(timeout):
			errs = append(errs, fmt.Errorf("restarting %s: no result within %s", u, timeout))
		case <-ctx.Done():
			return report, ctx.Err()
		}
	}
	return report, errors.Join(errs...)
}
