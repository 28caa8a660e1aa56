package selfupdate

import (
	"fmt"
	"time"

	"github.com/edgefleet/fleet/pkg/release"
)

// Decision is what a start of the agent runs.
type Decision struct {
	// Path is the binary to run; "" runs the installed one.
	Path string
	// Slot is the release Path holds.
	Slot Slot
	// Trial is set when Path runs on trial.
	Trial *Trial
	// RolledBack is set when this start ended a failed trial.
	RolledBack *Result
}

// Decide applies the start rules, in order:
//
//  1. A trial not started yet runs, and its start is counted first.
//  2. A trial started before and not committed has failed (it crashed,
//     was killed, hung or never reached the hub in time): it ends as
//     rolled back, and the rules go on.
//  3. The committed release runs, unless the installed binary is the same
//     release or a newer one (a package or image update since).
//  4. Else the installed binary runs.
//
// installed is the installed binary's version.
func (s Store) Decide(now time.Time, installed string) (Decision, error) {
	var d Decision
	if t, ok := s.Trial(); ok {
		if t.Starts == 0 {
			t.Starts, t.Deadline = 1, now.Add(t.Within).UTC()
			if err := s.save(trialFile, t); err != nil {
				return Decision{}, fmt.Errorf("recording the start of the trial of %s: %w", t.Version, err)
			}
			return Decision{Path: s.Binary(t.Slot), Slot: t.Slot, Trial: &t}, nil
		}
		reason := fmt.Sprintf("fleet-agent %s stopped before it committed (it had until %s)", t.Version, t.Deadline.Format(time.RFC3339))
		if now.After(t.Deadline) {
			reason = fmt.Sprintf("fleet-agent %s did not reach the hub and pass its checks by %s", t.Version, t.Deadline.Format(time.RFC3339))
		}
		if err := s.rollBack(t, reason, now); err != nil {
			return Decision{}, fmt.Errorf("ending the failed trial of %s: %w", t.Version, err)
		}
		d.RolledBack = &Result{Slot: t.Slot, From: t.From, State: RolledBack, Reason: reason, At: now.UTC()}
	}
	if c, ok := s.Current(); ok {
		if cmp, err := release.Compare(installed, c.Version); err == nil && cmp >= 0 {
			return d, nil
		}
		d.Path, d.Slot = s.Binary(c), c
	}
	return d, nil
}
