package agent

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/agent/linkprobe"
	"github.com/edgefleet/fleet/pkg/agent/session"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// LinkCounter reads the kernel's link counters: a *linkprobe.Probe.
type LinkCounter interface {
	Read() (linkprobe.Counters, error)
}

// UseLinkProbe makes Run report link health every Config.LinkInterval:
// the counters of p, or, when p is nil, only the round-trip time to the
// hub, with unavailable saying why there is no probe. Call before Run.
func (a *Agent) UseLinkProbe(p LinkCounter, unavailable string) {
	a.linkProbe, a.linkUnavailable, a.linkEnabled = p, unavailable, true
}

// linkSource is the link-health source of the sync loop: each window it
// turns the probe's running totals into counts for the window, adds a
// ping to the hub, and hands the result to the loop (which puts it in the
// status).
func (a *Agent) linkSource(ctx context.Context) {
	var last linkprobe.Counters
	probe := a.linkProbe
	if probe != nil {
		var err error
		if last, err = probe.Read(); err != nil {
			a.log.Error(err, "Reading the link probe; reporting the round-trip time only")
			probe, a.linkUnavailable = nil, "reading the probe: "+err.Error()
		}
	}
	start := time.Now()
	t := time.NewTicker(a.cfg.LinkInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h := &infrav1.LinkHealth{
				Probe:         infrav1.LinkProbeUnavailable,
				Message:       truncate(a.linkUnavailable, 512),
				WindowSeconds: int32(max(now.Sub(start).Round(time.Second)/time.Second, 1)),
				ObservedTime:  metav1.NewTime(now.Truncate(time.Second)),
			}
			start = now
			if probe != nil {
				c, err := probe.Read()
				if err != nil {
					h.Message = truncate("reading the probe: "+err.Error(), 512)
				} else {
					h.Probe, h.Message = infrav1.LinkProbeRunning, ""
					// Totals only grow; a wrap would need 2^64 events.
					h.TCPRetransmits = int64(c.Retransmits - last.Retransmits)
					h.TCPRetransmitsToHub = int64(c.RetransmitsToHub - last.RetransmitsToHub)
					h.PacketDrops = int64(c.Drops - last.Drops)
					last = c
				}
			}
			// A ping that gets no answer counts as the whole timeout: a link
			// too slow to answer is not a healthy one. Not connected at all
			// says nothing about the link (AgentConnected tells that).
			const pingTimeout = 10 * time.Second
			if rtt, err := a.session.Ping(pingTimeout); !errors.Is(err, session.ErrNotConnected) {
				if err != nil {
					rtt = pingTimeout
				}
				ms := max(rtt.Milliseconds(), 0)
				h.HubRTTMilliseconds = &ms
			}
			select {
			case a.links <- h:
			case <-ctx.Done():
				return
			}
		}
	}
}
