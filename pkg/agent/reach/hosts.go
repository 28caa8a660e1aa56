package reach

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// The block of /etc/hosts the agent owns. Everything outside it is left
// exactly as it was.
const (
	hostsBegin = "# BEGIN fleet-agent: cluster API endpoint (managed, do not edit)\n"
	hostsEnd   = "# END fleet-agent\n"
)

// hostsBlock renders the managed entry: the endpoint's name at each of its
// addresses, best first (resolvers return them all, in order). Only names
// in fleet's own zone get one; any other name is the site DNS's.
func hostsBlock(r *wire.Reach) []byte {
	if r == nil || len(r.Addresses) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(r.Endpoint)
	if err != nil || !managedName(host) {
		return nil
	}
	var b bytes.Buffer
	b.WriteString(hostsBegin)
	for _, ip := range r.Addresses {
		if net.ParseIP(ip) == nil {
			continue // the codec refuses these; never write one anyway
		}
		b.WriteString(ip + " " + host + "\n")
	}
	b.WriteString(hostsEnd)
	return b.Bytes()
}

// writeHostsEntry replaces the managed block of the hosts file at path
// with block (creating the file if there is none) and leaves the rest
// untouched. A symlinked hosts file is written where it points, and the
// file keeps its mode.
func writeHostsEntry(path string, block []byte) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	cur, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	next := stripHostsBlock(cur)
	if block != nil {
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
	if err := os.WriteFile(tmp, next, mode); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.EXDEV) {
			return fmt.Errorf("replacing %s: %w", path, err)
		}
		if err := os.WriteFile(path, next, mode); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// stripHostsBlock removes the managed block, if any. If someone deleted
// its END line, only the BEGIN line goes: a stale entry of ours may stay
// behind, but nothing of the user's is ever lost.
func stripHostsBlock(b []byte) []byte {
	begin := []byte(hostsBegin)
	i := bytes.Index(b, begin)
	if i < 0 {
		return slices.Clone(b)
	}
	out := slices.Clone(b[:i])
	rest := b[i+len(begin):]
	end := []byte(strings.TrimSuffix(hostsEnd, "\n"))
	if j := bytes.Index(rest, end); j >= 0 {
		rest = rest[j+len(end):]
		rest = bytes.TrimPrefix(rest, []byte("\n"))
	}
	return append(out, rest...)
}
