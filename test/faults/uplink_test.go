package faults

import (
	"context"
	"fmt"
	"os/exec"
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
	// netns and port are where the agents reach the relay: lossy drops
	// packets there with nftables.
	netns string
	port  string

	mu    sync.Mutex
	state string
}

func newUplink(t *testing.T, upstream, netns, port string) *uplink {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "uplink", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("starting the uplink relay: %v", err)
	}
	t.Cleanup(p.Stop)
	return &uplink{proxy: p, netns: netns, port: port, state: "up"}
}

// addr is where the relay listens.
func (u *uplink) addr() string { return u.proxy.Listen }

// apply puts the uplink into one of its states: up, cut (connections
// reset, new ones refused, as a modem that reboots), half-open (every byte
// dropped both ways, connections kept, as a link that dies silently) or
// slow (1 s each way, as a congested link) or lossy (30 % of the
// packets to and from the relay dropped and 2 s each way: a bad cell
// link).
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
	case "lossy":
		u.proxy.Toxics.ResetToxics(context.Background())
		if err := u.nft("delete table inet fleet-faults\n"); err != nil {
			return err
		}
	}
	u.state = "up"
	switch state {
	case "up":
	case "cut":
		u.proxy.Stop()
	case "half-open":
		for _, dir := range []string{"upstream", "downstream"} {
			if err := u.toxic(`{"name":"drop-` + dir + `","type":"timeout","stream":"` + dir + `","attributes":{"timeout":0}}`); err != nil {
				return err
			}
		}
	case "lossy":
		if err := u.nft(fmt.Sprintf(`table inet fleet-faults {
	chain out {
		type filter hook output priority 0;
		tcp dport %[1]s numgen random mod 100 < 30 drop
		tcp sport %[1]s numgen random mod 100 < 30 drop
	}
}
`, u.port)); err != nil {
			return err
		}
		if err := u.late(2000); err != nil {
			return err
		}
	case "slow":
		if err := u.late(1000); err != nil {
			return err
		}
	default:
		return fmt.Errorf("no uplink state %q", state)
	}
	u.state = state
	return nil
}

// nft loads rules into the site's network namespace.
func (u *uplink) nft(rules string) error {
	cmd := exec.Command("nsenter", "--net="+u.netns, "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", u.netns, err, out)
	}
	return nil
}

// late delays every byte by ms (± 200 ms) each way.
func (u *uplink) late(ms int) error {
	for _, dir := range []string{"upstream", "downstream"} {
		if err := u.toxic(fmt.Sprintf(`{"name":"late-%s","type":"latency","stream":"%s","attributes":{"latency":%d,"jitter":200}}`, dir, dir, ms)); err != nil {
			return err
		}
	}
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
