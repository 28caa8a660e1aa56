package linkprobe

import "errors"

// ErrUnavailable wraps every reason the probe cannot run here.
var ErrUnavailable = errors.New("probe unavailable")

// Options configures Start.
type Options struct {
	// HubPort, when non-zero, also counts retransmissions whose destination
	// port is this (the agent's link to the hub).
	HubPort uint16
	// TracefsDir defaults to /sys/kernel/tracing; Start mounts tracefs there
	// if it is not mounted and it can, falling back to
	// /sys/kernel/debug/tracing. An explicit TracefsDir is the only one
	// tried (and mounted if need be).
	TracefsDir string
}

// Counters are totals since Start, summed over all CPUs.
type Counters struct {
	Retransmits      uint64 // tcp:tcp_retransmit_skb events, all sockets
	RetransmitsToHub uint64 // of those, to Options.HubPort (0 when HubPort is 0)
	Drops            uint64 // skb:kfree_skb events for IPv4/IPv6 packets (any transport)
}
