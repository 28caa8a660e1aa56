package load

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"
)

// Replicas stands for the gateway Service in front of several hub
// replicas, in the agents' own dialer: each connection goes to the next
// replica in turn, passing over those that refuse, from the agent's own
// loopback address, so that the hubs' per-source limits see the agents'
// sources, as through a load balancer that keeps them
// (externalTrafficPolicy: Local). A proxy would hold two more sockets
// per agent in the driver's process, past the open-file limit some
// machines fix for 10,000 agents.
type Replicas struct {
	targets []string
	next    atomic.Uint64
}

// NewReplicas spreads connections over the replicas' gateways (host:port).
func NewReplicas(targets ...string) *Replicas { return &Replicas{targets: targets} }

// dialer is an agent's dialer from source address local ("" for any);
// the address it is asked for is the Service's, and stands for them all.
func (r *Replicas) dialer(local string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		start := r.next.Add(1)
		var errs []error
		for i := range len(r.targets) {
			c, err := d.DialContext(ctx, network, r.targets[(int(start)+i)%len(r.targets)])
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
}
