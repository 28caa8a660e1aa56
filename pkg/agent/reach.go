package agent

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// The block of /etc/hosts the agent owns. Everything outside it is left
// exactly as it was.
const (
	hostsBegin = "# BEGIN fleet-agent: cluster API endpoint (managed, do not edit)\n"
	hostsEnd   = "# END fleet-agent\n"
)

// setReach takes the hub's latest word on the cluster endpoint: it is the
// only target tunnels may dial, and its name must resolve at the site to
// the cluster's API server (kubeadm and the kubelet dial it too), so the
// managed hosts entry is brought up to date before the bootstrap that
// needs it runs.
func (a *Agent) setReach(r *wire.Reach) {
	a.reachMu.Lock()
	defer a.reachMu.Unlock()
	old := a.reach.Load()
	if wire.SameReach(old, r) {
		return
	}
	a.reach.Store(r)
	if err := writeHostsEntry(filepath.Join(a.cfg.RootDir, "etc", "hosts"), r); err != nil {
		a.log.Error(err, "Updating the cluster endpoint's hosts entry")
		return
	}
	if r == nil {
		a.log.Info("Cluster endpoint forgotten: the host belongs to no cluster")
		return
	}
	a.log.Info("Cluster endpoint", "endpoint", r.Endpoint, "addresses", r.Addresses)
}


// hostsBlock renders the managed entry: the endpoint's name at its best
// address. An endpoint given as an address needs no entry.
func hostsBlock(r *wire.Reach) []byte {
	if r == nil || len(r.Addresses) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(r.Endpoint)
	if err != nil || net.ParseIP(host) != nil {
		return nil
	}
	return []byte(hostsBegin + r.Addresses[0] + " " + host + "\n" + hostsEnd)
}

// writeHostsEntry replaces the managed block of the hosts file at path
// (creating the file if there is none) and leaves the rest untouched.
func writeHostsEntry(path string, r *wire.Reach) error {
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	next := stripHostsBlock(cur)
	if block := hostsBlock(r); block != nil {
		if len(next) > 0 && next[len(next)-1] != '\n' {
			next = append(next, '\n')
		}
		next = append(next, block...)
	}
	if bytes.Equal(cur, next) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Replace atomically so no resolver ever reads half a file, except
	// where /etc/hosts is a bind mount (containers), which only takes an
	// in-place write.
	tmp := path + ".fleet-agent.tmp"
	if err := os.WriteFile(tmp, next, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("replacing %s: %w", path, err)
		}
		if err := os.WriteFile(path, next, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// stripHostsBlock removes the managed block, if any.
func stripHostsBlock(b []byte) []byte {
	i := bytes.Index(b, []byte(hostsBegin))
	if i < 0 {
		return slices.Clone(b)
	}
	out := slices.Clone(b[:i])
	rest := b[i:]
	if j := bytes.Index(rest, []byte(hostsEnd)); j >= 0 {
		out = append(out, rest[j+len(hostsEnd):]...)
	}
	return out
}
