package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Stager fetches a Kubernetes version's archive, checks it against its
// sha256 and stages it on the host (kubestage.Stager).
type Stager interface {
	Stage(ctx context.Context, o wire.StageOrder, progress func(done, total int64)) error
}

// StagingError is a failed Stage that says whether trying the same order
// again is pointless (the archive is not what the release says) or waits
// for space.
type StagingError interface {
	IsPermanent() bool
	IsDiskFull() bool
}

// Retry delays of a failed fetch: a cut uplink backs off from the first to
// the last; a full disk waits the last.
const (
	stagingFirstRetry = 10 * time.Second
	stagingLastRetry  = 5 * time.Minute
)

// UseStager lets the agent fetch the versions the hub names in Stage. Only
// an agent with an upgrader stages (it is what uses staged versions and
// reports them). A stager that takes the archives the hub carries
// (ArchivesFromHub), or fetches them from OCI registries, says so, and the
// agent announces it. Call before Run, after UseUpgrader.
func (a *Agent) UseStager(s Stager) {
	a.staging.stager = s
	if a.upgrader == nil {
		return
	}
	if h, ok := s.(interface{ TakesArchivesFromHub() bool }); ok && h.TakesArchivesFromHub() {
		a.session.AddCapability(wire.CapabilityStageFromHub)
	}
	if o, ok := s.(interface{ FetchesFromOCI() bool }); ok && o.FetchesFromOCI() {
		a.session.AddCapability(wire.CapabilityStageFromOCI)
	}
}

// staging is the room that fetches versions, one at a time, apart from the
// worker: a download of hundreds of megabytes over a site's uplink must not
// hold up a bootstrap or a reset.
type staging struct {
	stager Stager
	kick   chan struct{}

	mu sync.Mutex
	// want is the latest Stage the hub sent.
	want []wire.StageOrder
	// status by version, for the versions in want.
	status map[string]*infrav1.HostStagingStatus
	// failed holds orders whose archive was not what the release says;
	// the same order is not fetched again.
	failed map[string]wire.StageOrder
	// attempts counts transient failures by version, for the backoff.
	attempts map[string]int
	// current is the order being fetched, and how to cancel it.
	current *wire.StageOrder
	cancel  context.CancelFunc
}

func newStaging() staging {
	return staging{kick: make(chan struct{}, 1), status: map[string]*infrav1.HostStagingStatus{},
		failed: map[string]wire.StageOrder{}, attempts: map[string]int{}}
}

// setStage records the hub's latest orders and wakes the staging worker;
// a fetch no longer ordered is cut.
func (a *Agent) setStage(orders []wire.StageOrder) {
	s := &a.staging
	if s.stager == nil || a.upgrader == nil {
		return
	}
	s.mu.Lock()
	if slices.Equal(s.want, orders) {
		s.mu.Unlock()
		return
	}
	s.want = slices.Clone(orders)
	if s.current != nil && !slices.Contains(orders, *s.current) {
		s.cancel()
	}
	for v := range s.status {
		if !slices.ContainsFunc(orders, func(o wire.StageOrder) bool { return o.Version == v }) {
			delete(s.status, v)
		}
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	a.refreshStatus()
}

// stagingWorker fetches what is ordered and not staged, one order at a
// time, and tries failed fetches again after a backoff.
func (a *Agent) stagingWorker(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.staging.kick:
		case <-retry.C:
		}
		if wait := a.stageOrdered(ctx); wait > 0 {
			retry.Reset(wait)
		}
	}
}

// stageOrdered fetches each ordered version the host lacks; it returns how
// long to wait before trying failed ones again (0: nothing to retry).
func (a *Agent) stageOrdered(ctx context.Context) time.Duration {
	s := &a.staging
	s.mu.Lock()
	want := slices.Clone(s.want)
	s.mu.Unlock()
	var wait time.Duration
	for _, o := range want {
		if ctx.Err() != nil {
			return 0
		}
		if slices.Contains(a.upgrader.Staged(), o.Version) || a.Applied().KubernetesVersion == o.Version {
			a.setStaging(o.Version, infrav1.StagingStaged, "")
			continue
		}
		s.mu.Lock()
		failed := s.failed[o.Version] == o
		s.mu.Unlock()
		if failed {
			continue
		}
		if next := a.stageOne(ctx, o); next > 0 && (wait == 0 || next < wait) {
			wait = next
		}
	}
	return wait
}

// stageOne fetches one order; it returns when to try again (0: done, or
// never).
func (a *Agent) stageOne(ctx context.Context, o wire.StageOrder) time.Duration {
	s := &a.staging
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if !slices.Contains(s.want, o) {
		s.mu.Unlock()
		return 0
	}
	s.current, s.cancel = &o, cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.current, s.cancel = nil, nil
		s.mu.Unlock()
	}()

	from := o.URL
	if o.Hub {
		from = "the hub, through the session"
	}
	a.log.Info("Fetching a Kubernetes version", "version", o.Version, "from", from)
	a.setStaging(o.Version, infrav1.StagingDownloading, "")
	start := time.Now()
	reported := int64(-1)
	err := s.stager.Stage(fctx, o, func(done, total int64) {
		// A status write per tenth of the archive (per 64 MiB when its
		// size is unknown), not per read.
		step := int64(64 << 20)
		if total > 0 {
			step = max(total/10, 1)
		}
		if done/step == reported && done != total {
			return
		}
		reported = done / step
		a.setStagingProgress(o.Version, done, total)
	})
	switch {
	case err == nil:
		a.log.Info("Staged a Kubernetes version", "version", o.Version, "took", time.Since(start).Round(time.Second).String())
		s.mu.Lock()
		delete(s.attempts, o.Version)
		s.mu.Unlock()
		a.setStaging(o.Version, infrav1.StagingStaged, "")
		return 0
	case fctx.Err() != nil:
		// No longer ordered, or the agent is stopping.
		return 0
	}
	var se StagingError
	isStaging := errors.As(err, &se)
	if isStaging && se.IsPermanent() {
		a.log.Error(err, "Staging failed; not fetching this archive again", "version", o.Version)
		s.mu.Lock()
		s.failed[o.Version] = o
		s.mu.Unlock()
		a.setStaging(o.Version, infrav1.StagingFailed, err.Error())
		return 0
	}
	s.mu.Lock()
	s.attempts[o.Version]++
	n := s.attempts[o.Version]
	s.mu.Unlock()
	wait := min(stagingFirstRetry<<min(n-1, 10), stagingLastRetry)
	if isStaging && se.IsDiskFull() {
		wait = stagingLastRetry
	}
	a.log.Error(err, "Staging failed; trying again later", "version", o.Version, "in", wait.String())
	a.setStaging(o.Version, infrav1.StagingDownloading, fmt.Sprintf("%s; trying again in %s (attempt %d)", err, wait, n+1))
	return wait
}

func (a *Agent) setStaging(version string, state infrav1.StagingState, msg string) {
	s := &a.staging
	s.mu.Lock()
	st, ok := s.status[version]
	if !ok {
		st = &infrav1.HostStagingStatus{Version: version}
	}
	changed := !ok || st.State != state || st.Message != msg
	st.State, st.Message = state, truncate(msg, 4000)
	if state == infrav1.StagingStaged {
		st.Bytes = st.TotalBytes
	}
	// Only ordered versions have a status.
	if slices.ContainsFunc(s.want, func(o wire.StageOrder) bool { return o.Version == version }) {
		s.status[version] = st
	}
	s.mu.Unlock()
	if changed {
		a.refreshStatus()
	}
}

func (a *Agent) setStagingProgress(version string, done, total int64) {
	s := &a.staging
	s.mu.Lock()
	if st := s.status[version]; st != nil {
		st.Bytes, st.TotalBytes = done, total
		if done > 0 {
			// Bytes arrive: a message about an earlier cut is old news.
			st.Message = ""
		}
	}
	s.mu.Unlock()
	a.refreshStatus()
}

// stagingStatus is the staging room's part of the status, by version.
func (a *Agent) stagingStatus() []infrav1.HostStagingStatus {
	s := &a.staging
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]infrav1.HostStagingStatus, 0, len(s.status))
	for _, st := range s.status {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	if len(out) == 0 {
		return nil
	}
	return out
}
