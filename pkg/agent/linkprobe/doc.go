// Package linkprobe is fleet-agent's link-health probe: two tiny eBPF
// programs on kernel tracepoints that count TCP retransmissions and dropped
// IP packets, so the agent can tell the hub how healthy the site's uplink is
// without capturing any traffic.
//
// # What is counted
//
//   - Retransmits: every tcp:tcp_retransmit_skb event, for all sockets in
//     all network namespaces (the tracepoint is global). It fires once per
//     retransmitted segment (fast retransmit, RTO, tail-loss probe, SYN and
//     FIN retransmissions alike).
//   - RetransmitsToHub: the subset of those whose destination port equals
//     Options.HubPort, i.e. segments the agent had to resend to the hub. The
//     tracepoint stores dport in host byte order (ntohs() in
//     include/trace/events/tcp.h), so it is compared as is. Zero when
//     HubPort is 0.
//   - Drops: skb:kfree_skb events whose protocol is IPv4 (0x0800) or IPv6
//     (0x86DD). The tracepoint stores skb->protocol in host byte order
//     (ntohs() in include/trace/events/skb.h). Since Linux 5.17 freeing a
//     packet that was used normally goes through consume_skb, so kfree_skb
//     means a drop; a few paths still free without a specific reason
//     (SKB_DROP_REASON_NOT_SPECIFIED), and older kernels use kfree_skb more
//     loosely. The tracepoint carries no transport header, so this is every
//     dropped IP packet (TCP, UDP, ICMP...), not only TCP. If the kernel has
//     no kfree_skb tracepoint, Drops stays 0 and Attached says so.
//
// # Why tracepoints
//
// Tracepoints are a stable kernel interface, unlike kprobes on internal
// functions, and their record layout is published in tracefs. The programs
// are assembled at Start (there is no C toolchain in the build) and read
// each field at the offset the running kernel reports in
// events/<group>/<name>/format, so no offset is hard-coded.
//
// # Cost
//
// A tracepoint that nothing is attached to is a patched-out branch, and
// packets that are neither retransmitted nor dropped never reach these
// tracepoints, so ordinary traffic pays nothing. Each retransmission or drop
// costs the kernel's tracepoint dispatch (it fills in the trace record) plus
// 14 to 23 JIT-compiled BPF instructions: one or two per-CPU array lookups
// and increments; BenchmarkProbeOverhead measures it (100-300 ns per event
// on a small VM). Counters live in a per-CPU array,
// so CPUs never contend on a cache line; Read sums the CPUs with one lookup
// syscall per counter. Memory use is a few hundred bytes per CPU.
//
// # Privileges
//
// Start needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN; root has both) to
// load and attach tracepoint programs, and read access to tracefs, which is
// root-only by default. If tracefs is not mounted, Start mounts it at
// /sys/kernel/tracing (needs CAP_SYS_ADMIN; the mount is left in place, as
// the kernel's own tooling does), falling back to /sys/kernel/debug/tracing.
// On kernels before 5.11, BPF memory is charged to RLIMIT_MEMLOCK, which the
// caller may have to raise. Wherever any of this is missing, Start returns
// an error wrapping ErrUnavailable that names the failed step and the likely
// missing privilege, and the agent carries on without link metrics.
package linkprobe
