package agent

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/edgefleet/fleet/pkg/agent/session"
	"github.com/edgefleet/fleet/pkg/agent/state"
)

// ErrPinMismatch means the hub's CA is not the pinned one: the agent talks
// to an impostor (or was given the wrong pin) and sends it nothing.
var ErrPinMismatch = session.ErrPinMismatch

// EnrollError is the hub's refusal of an enrollment.
type EnrollError = session.EnrollError

// EnrollOnce enrolls the host described by cfg and stores its identity,
// without starting a session (`fleet-agent enroll`, image bakers, tests).
func EnrollOnce(ctx context.Context, cfg Config) error {
	return session.New(sessionOptions(cfg), state.Store{Dir: cfg.StateDir}, logr.Discard()).Enroll(ctx)
}
