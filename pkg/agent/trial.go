package agent

import (
	"errors"
	"sync/atomic"
	"time"
)

// ErrTrialExpired ends a run of a release on trial that did not reach the
// hub and pass its checks in time; the next start rolls it back.
var ErrTrialExpired = errors.New("this release ran on trial and did not reach the hub and pass its checks in time; the next start rolls it back")

// trialGate is this run's trial, when it is one.
type trialGate struct {
	version  string
	deadline time.Time
	commit   func() error
	// done is read by status reports from other goroutines.
	done    atomic.Bool
	expired bool
}

// UseTrial makes this run the trial of release version: commit is called
// once the agent has had a desired state from the hub (a session through
// the site's network, authenticated both ways) while healthy; if that has
// not happened by deadline, Run returns ErrTrialExpired. Call before Run.
func (a *Agent) UseTrial(version string, deadline time.Time, commit func() error) {
	a.trial = &trialGate{version: version, deadline: deadline, commit: commit}
}

// commitTrial commits the trial, once, when the agent is healthy.
func (a *Agent) commitTrial() {
	t := a.trial
	if t == nil || t.done.Load() || t.expired || a.stuck {
		return
	}
	if err := t.commit(); err != nil {
		a.log.Error(err, "Cannot commit the release on trial; trying again at the next desired state", "version", t.version)
		return
	}
	t.done.Store(true)
	a.log.Info("Committed the release on trial: it reached the hub and passed its checks", "version", t.version)
	a.refreshStatus()
}

// trialExpired tells the sync loop to stop a trial past its deadline.
func (a *Agent) trialExpired(now time.Time) bool {
	t := a.trial
	if t == nil || t.done.Load() || !now.After(t.deadline) {
		return false
	}
	t.expired = true
	a.log.Info("The release on trial did not reach the hub and pass its checks in time; stopping", "version", t.version, "deadline", t.deadline)
	return true
}

// onTrial is the version this run tries, until it commits ("" when it
// runs no trial).
func (a *Agent) onTrial() string {
	if t := a.trial; t != nil && !t.done.Load() {
		return t.version
	}
	return ""
}
