package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// uplink is a site's way to the hub: a relay in this process that the
// suite cuts, half-opens or slows. The site's router (testhost.Site's
// Forward) carries the agents' connections to it.
type uplink struct {
	proxy *toxiproxy.Proxy

	mu    sync.Mutex
	state string
}

func newUplink(t *testing.T, upstream string) *uplink {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "uplink", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("starting the uplink relay: %v", err)
	}
	t.Cleanup(p.Stop)
	return &uplink{proxy: p, state: "up"}
}

// addr is where the relay listens.
func (u *uplink) addr() string { return u.proxy.Listen }

// apply puts the uplink into one of its states: up, cut (connections
// reset, new ones refused, as a modem that reboots), half-open (every byte
// dropped both ways, connections kept, as a link that dies silently) or
// slow (2 s each way, as a bad cell link).
func (u *uplink) apply(state string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if state == u.state {
		return nil
	}
	// Back to up first: each state is one change from there.
	switch u.state {
	case "cut":
		if err := u.proxy.Start(); err != nil {
			return fmt.Errorf("restoring the uplink: %w", err)
		}
	case "half-open", "slow":
		u.proxy.Toxics.ResetToxics(context.Background())
	}
	u.state = "up"
	switch state {
	case "up":
	case "cut":
		u.proxy.Stop()
	case "half-open":
		for _, dir := range []string{"upstream", "downstream"} {
			if err := u.toxic(`{"name":"drop-`+dir+`","type":"timeout","stream":"`+dir+`","attributes":{"timeout":0}}`); err != nil {
				return err
			}
		}
	case "slow":
		for _, dir := range []string{"upstream", "downstream"} {
			if err := u.toxic(`{"name":"late-`+dir+`","type":"latency","stream":"`+dir+`","attributes":{"latency":1000,"jitter":200}}`); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("no uplink state %q", state)
	}
	u.state = state
	return nil
}

func (u *uplink) toxic(spec string) error {
	if _, err := u.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return fmt.Errorf("uplink toxic %s: %w", spec, err)
	}
	return nil
}

// fault is one spell of a bad uplink.
type fault struct {
	State string
	After time.Duration
	For   time.Duration
}

func (f fault) String() string { return fmt.Sprintf("%s for %s after %s", f.State, f.For, f.After) }
