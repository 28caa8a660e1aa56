package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/hostclock"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	"github.com/edgefleet/fleet/pkg/agent/streams"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/release"
)

// errOrderChanged ends a transfer the hub no longer orders.
var errOrderChanged = errors.New("the hub ordered another release")

// ErrRestartForRelease ends a run so that the launcher starts the release
// the hub ordered (on trial), or the installed binary it reverts to.
var ErrRestartForRelease = errors.New("restarting into the ordered fleet-agent release")

// Releases is what the agent needs to run the releases the hub orders.
type Releases struct {
	Store selfupdate.Store
	// Roots are the release root keys installed with the agent; without
	// any, every release is refused (RootsProblem says why).
	Roots        release.Roots
	RootsProblem string
	// Running is this binary's version; Installed the installed one's.
	Running, Installed string
}

// Timing of transfers: a request no stream answers within askAgain is
// made again (the hub ignores it while that host's transfer waits for a
// place); a stream that brings nothing for stallTimeout is given up and
// the rest asked for; a failure is tried again after a backoff up to
// lastRetry.
const (
	releaseAskAgain     = 15 * time.Second
	releaseStallTimeout = time.Minute
	releaseLastRetry    = 5 * time.Minute
	defaultTrial        = 5 * time.Minute
)

// releaseFirstRetry is a variable for the tests that need a back-off
// longer than they wait.
var releaseFirstRetry = 5 * time.Second

// UseReleases lets the agent run the releases the hub orders and report
// them. Call before Run.
func (a *Agent) UseReleases(r Releases) {
	if r.Running == "" {
		r.Running = a.cfg.Version
	}
	if r.Installed == "" {
		r.Installed = r.Running
	}
	a.rel = &releaseRoom{Releases: r, kick: make(chan struct{}, 1), progress: make(chan struct{}, 1), refused: map[string]infrav1.AgentTransferStatus{}}
	a.session.AddCapability(wire.CapabilitySelfUpdate)
}

// releaseRoom gets the ordered release onto the host and hands over to
// it; apart from the worker, since a transfer over a site's uplink must
// not hold up a bootstrap.
type releaseRoom struct {
	Releases
	kick     chan struct{}
	progress chan struct{}

	mu       sync.Mutex
	want     *wire.AgentReleaseOrder
	send     func(any) error
	transfer *infrav1.AgentTransferStatus
	// refused holds the orders (by sha256 and version) this host will
	// not carry out, with what it reported: it reports it again.
	refused map[string]infrav1.AgentTransferStatus
	// receiving is set while a stream writes the partial binary.
	receiving bool
}

func (r *releaseRoom) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// setRelease records the hub's latest order.
func (a *Agent) setRelease(o *wire.AgentReleaseOrder) {
	r := a.rel
	if r == nil {
		return
	}
	r.mu.Lock()
	r.want = o
	r.mu.Unlock()
	r.wake()
}

// attachRelease gives the room the new session's sender (nil: none).
func (a *Agent) attachRelease(send func(any) error) {
	if r := a.rel; r != nil {
		r.mu.Lock()
		r.send = send
		r.mu.Unlock()
		if send != nil {
			r.wake()
		}
	}
}

// releaseStatus is the store's account with the transfer's.
func (a *Agent) releaseStatus() *infrav1.AgentReleaseStatus {
	r := a.rel
	if r == nil {
		return nil
	}
	// Never nil: an agent that runs the releases it is sent says so.
	st := r.Store.Report()
	if st == nil {
		st = &infrav1.AgentReleaseStatus{}
	}
	st.OnTrial = a.onTrial()
	r.mu.Lock()
	if t := r.transfer; t != nil {
		tc := *t
		st.Transfer = &tc
	}
	r.mu.Unlock()
	return st
}

func (a *Agent) setTransfer(t *infrav1.AgentTransferStatus) {
	r := a.rel
	r.mu.Lock()
	same := t == nil && r.transfer == nil || t != nil && r.transfer != nil && *t == *r.transfer
	r.transfer = t
	r.mu.Unlock()
	if !same {
		a.refreshStatus()
	}
}

func (a *Agent) refuseRelease(o *wire.AgentReleaseOrder, reason, msg string) {
	r := a.rel
	st := infrav1.AgentTransferStatus{Version: o.Version, State: infrav1.AgentTransferRefused, Reason: reason, Message: truncate(msg, 1000)}
	r.mu.Lock()
	r.refused[o.SHA256+"/"+o.Version] = st
	r.mu.Unlock()
	a.log.Info("Refused the ordered fleet-agent release; keeping the one that runs", "version", o.Version, "reason", reason, "message", msg)
	a.setTransfer(&st)
}

// releaseWorker acts on the latest order until it hands over to a new
// release (it then returns ErrRestartForRelease through stop).
func (a *Agent) releaseWorker(ctx context.Context, stop func(error)) {
	r := a.rel
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	attempts := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry.C:
		}
		r.mu.Lock()
		o := r.want
		r.mu.Unlock()
		done, err := a.runOrdered(ctx, o)
		switch {
		case done:
			// A bootstrap, reset or upgrade under way finishes first.
			for !a.workerBusy.since().IsZero() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
			r.mu.Lock()
			still := r.want != nil && o != nil && r.want.Version == o.Version && r.want.SHA256 == o.SHA256
			r.mu.Unlock()
			if !still {
				// Withdrawn meanwhile (an abort): not started after all.
				if err := r.Store.CancelTrial(); err != nil {
					a.log.Error(err, "Cannot cancel the trial of a release no longer ordered", "version", o.Version)
				}
				r.wake()
				continue
			}
			stop(ErrRestartForRelease)
			return
		case err != nil && ctx.Err() == nil:
			attempts++
			wait := min(releaseFirstRetry<<min(attempts-1, 10), releaseLastRetry)
			a.log.Info("Getting the ordered fleet-agent release failed; trying again", "version", o.Version, "reason", err.Error(), "in", wait.String())
			retry.Reset(wait)
		case err == nil:
			attempts = 0
		}
	}
}

// runOrdered brings the host to order o: done is true when the next
// start runs it.
func (a *Agent) runOrdered(ctx context.Context, o *wire.AgentReleaseOrder) (done bool, err error) {
	r := a.rel
	if o == nil || o.Version == r.Running {
		a.setTransfer(nil)
		return false, nil
	}
	r.mu.Lock()
	refused, ok := r.refused[o.SHA256+"/"+o.Version]
	r.mu.Unlock()
	if ok {
		// Said again: the order may come from a new roll-out.
		a.setTransfer(&refused)
		return false, nil
	}
	if last, ok := r.Store.LastResult(); ok && last.State == selfupdate.RolledBack && last.Version == o.Version {
		// Tried and rolled back: never again by itself, or a broken
		// release would be restarted into for ever.
		a.refuseRelease(o, "RolledBack", fmt.Sprintf("fleet-agent %s rolled back on trial on this host (%s); it is not tried again", o.Version, last.Reason))
		return false, nil
	}
	if floor := r.Store.Floor(); floor != "" {
		if c, err := release.Compare(o.Version, floor); err == nil && c < 0 {
			a.refuseRelease(o, release.ReasonBelowFloor, fmt.Sprintf("fleet-agent %s is below this host's version floor %s", o.Version, floor))
			return false, nil
		}
	}
	within := defaultTrial
	if o.TrialSeconds > 0 {
		within = time.Duration(o.TrialSeconds) * time.Second
	}
	if o.Version == r.Installed {
		if err := r.Store.UseInstalled(); err != nil {
			return false, fmt.Errorf("going back to the installed release: %w", err)
		}
		a.log.Info("Going back to the installed fleet-agent release, as ordered", "version", o.Version, "from", r.Running)
		return true, nil
	}
	if slot, ok := r.Store.SlotOf(o.Version); ok {
		if err := r.Store.BeginTrial(slot, r.Running, within); err != nil {
			return false, err
		}
		a.log.Info("Starting a release this host holds, on trial, as ordered", "version", o.Version, "from", r.Running)
		return true, nil
	}
	if len(o.Bundle) == 0 {
		a.refuseRelease(o, "NotAvailable", fmt.Sprintf("the hub has no signed fleet-agent %s for %s/%s, and this host holds none", o.Version, runtime.GOOS, runtime.GOARCH))
		return false, nil
	}
	if len(r.Roots) == 0 {
		a.refuseRelease(o, release.ReasonUntrusted, "this host holds no release root keys, so it runs no release it is sent: "+r.RootsProblem)
		return false, nil
	}
	p := release.Policy{Roots: r.Roots, OS: runtime.GOOS, Arch: runtime.GOARCH, Now: hostclock.Now()}
	art, err := r.Store.Check(o.Bundle, p)
	if err == nil && (art.Version != o.Version || art.SHA256 != o.SHA256 || art.Size != o.Size) {
		err = &release.Error{Reason: release.ReasonMalformed, Err: fmt.Errorf("the bundle signs %s (%s), not the ordered %s (%s)", art.Version, art.SHA256, o.Version, o.SHA256)}
	}
	var re *release.Error
	if errors.As(err, &re) {
		a.refuseRelease(o, re.Reason, err.Error())
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := a.fetchRelease(ctx, o); errors.Is(err, errOrderChanged) {
		a.setTransfer(nil)
		return false, nil
	} else if err != nil {
		return false, err
	}
	_, err = r.Store.StageFile(r.Store.Partial(o.SHA256), o.Bundle, p)
	if errors.As(err, &re) {
		_ = os.Remove(r.Store.Partial(o.SHA256))
		// The bytes are not what the bundle signs: a hub (or its cache)
		// serves something else. Refused for as long as this run lasts.
		a.refuseRelease(o, re.Reason, err.Error())
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := r.Store.BeginTrial(selfupdate.Slot{SHA256: o.SHA256, Version: o.Version}, r.Running, within); err != nil {
		return false, err
	}
	a.log.Info("Staged the ordered fleet-agent release; restarting into it on trial", "version", o.Version, "from", r.Running, "within", within.String())
	a.setTransfer(nil)
	return true, nil
}

// fetchRelease asks the hub for the rest of the binary until it is whole.
func (a *Agent) fetchRelease(ctx context.Context, o *wire.AgentReleaseOrder) error {
	r := a.rel
	path := r.Store.Partial(o.SHA256)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	again := time.NewTicker(releaseAskAgain)
	defer again.Stop()
	reported := int64(-1)
	for asked := false; ; {
		have := partialSize(path)
		if have > o.Size {
			_ = os.Remove(path)
			have = 0
		}
		// A status write per tenth of the binary, not per chunk.
		if step := have * 10 / o.Size; step != reported {
			reported = step
			a.setTransfer(&infrav1.AgentTransferStatus{Version: o.Version, State: infrav1.AgentTransferFetching, Bytes: have, TotalBytes: o.Size})
		}
		if have == o.Size {
			return nil
		}
		r.mu.Lock()
		send, busy, cur := r.send, r.receiving, r.want
		r.mu.Unlock()
		if cur == nil || cur.SHA256 != o.SHA256 || cur.Version != o.Version {
			// The worker acts on the new order next.
			r.wake()
			return errOrderChanged
		}
		if !asked && !busy {
			if send == nil {
				return errors.New("not connected to the hub")
			}
			a.log.Info("Asking the hub for the ordered fleet-agent release", "version", o.Version, "offset", have, "size", o.Size)
			if err := send(&wire.ReleaseRequest{SHA256: o.SHA256, Offset: have}); err != nil {
				return fmt.Errorf("asking the hub for the binary: %w", err)
			}
			asked = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.kick:
			// A new order, or a new session: look again (and hand the
			// kick on if the order changed).
			r.mu.Lock()
			asked = asked && r.receiving
			r.mu.Unlock()
		case <-again.C:
			r.mu.Lock()
			asked = asked && r.receiving
			r.mu.Unlock()
		case <-r.progress:
			r.mu.Lock()
			asked = asked && r.receiving
			r.mu.Unlock()
		}
	}
}

func partialSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// receiveRelease serves a ReleaseData stream: the bytes of the ordered
// binary from the offset this host asked for, appended to what it has.
func (a *Agent) receiveRelease(st net.Conn, v int, msg any) {
	defer st.Close()
	r := a.rel
	m := msg.(*wire.ReleaseData)
	if r == nil {
		streams.Refuse(st, v, wire.ErrUnexpected, "this agent runs no releases it is sent")
		return
	}
	r.mu.Lock()
	o := r.want
	ok := o != nil && o.SHA256 == m.SHA256 && o.Size == m.Size && !r.receiving
	if ok {
		r.receiving = true
	}
	r.mu.Unlock()
	if !ok {
		streams.Refuse(st, v, wire.ErrUnexpected, "this agent did not ask for that release, or is receiving it already")
		return
	}
	path := r.Store.Partial(m.SHA256)
	defer func() {
		r.mu.Lock()
		r.receiving = false
		r.mu.Unlock()
		select {
		case r.progress <- struct{}{}:
		default:
		}
		// The worker may be waiting out a back-off rather than this
		// stream: a whole binary is staged now, not after it.
		if partialSize(path) == m.Size {
			r.wake()
		}
	}()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		a.log.Error(err, "Cannot keep the release binary on its way")
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != m.Offset {
		streams.Refuse(st, v, wire.ErrUnexpected, "this agent holds another part of that release")
		return
	}
	buf := make([]byte, 32<<10)
	left := m.Size - m.Offset
	last := time.Now()
	for left > 0 {
		_ = st.SetReadDeadline(time.Now().Add(releaseStallTimeout))
		n, err := st.Read(buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				a.log.Error(werr, "Cannot keep the release binary on its way")
				return
			}
			left -= int64(n)
		}
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			select {
			case r.progress <- struct{}{}:
			default:
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) || left > 0 {
				a.log.Info("A release transfer was cut; asking for the rest", "received", m.Size-left, "of", m.Size)
			}
			return
		}
	}
	_ = f.Sync()
}
