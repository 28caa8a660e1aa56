//go:build linux

package linkprobe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Slots of the per-CPU counter array.
const (
	slotRetransmits = iota
	slotRetransmitsToHub
	slotDrops
	numSlots
)

const (
	defaultTracefs = "/sys/kernel/tracing"
	debugTracefs   = "/sys/kernel/debug/tracing"

	// The programs only call bpf_map_lookup_elem, which is not GPL-only, so
	// the project's own licence is fine.
	progLicense = "Apache-2.0"

	ethPIP   = 0x0800
	ethPIPv6 = 0x86DD
)

// Probe is a loaded and attached set of counting programs. Its methods are
// safe for concurrent use.
type Probe struct {
	mu       sync.Mutex
	counters *ebpf.Map
	progs    []*ebpf.Program
	links    []link.Link
	attached []string
}

// Start loads the programs and attaches them to their tracepoints. On any
// failure it closes whatever it had opened and returns an error wrapping
// ErrUnavailable.
func Start(opts Options) (_ *Probe, err error) {
	if err := checkCapabilities(); err != nil {
		return nil, unavailable("checking capabilities", err, nil)
	}
	dir, err := tracefsDir(opts.TracefsDir)
	if err != nil {
		return nil, unavailable("locating tracefs", err, mountHint)
	}
	retrans, err := readFormat(dir, "tcp", "tcp_retransmit_skb")
	if err != nil {
		return nil, unavailable("reading tracepoint tcp:tcp_retransmit_skb", err, formatHint)
	}
	// kfree_skb is optional: without it only Drops is lost.
	drops, err := readFormat(dir, "skb", "kfree_skb")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, unavailable("reading tracepoint skb:kfree_skb", err, formatHint)
	}

	p := &Probe{}
	defer func() {
		if err != nil {
			_ = p.Close() // the load/attach error is the one worth reporting
		}
	}()

	p.counters, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "linkprobe_ctrs",
		Type:       ebpf.PerCPUArray, // no cross-CPU contention in the hot path
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: numSlots,
	})
	if err != nil {
		return nil, unavailable("creating counter map", err, bpfHint)
	}

	insns, err := retransmitProgram(p.counters, retrans, opts.HubPort)
	if err != nil {
		return nil, unavailable("assembling tcp_retransmit_skb program", err, nil)
	}
	if err := p.attach("tcp", "tcp_retransmit_skb", "lp_retransmit", insns); err != nil {
		return nil, err
	}
	if drops != nil {
		insns, err := dropProgram(p.counters, drops)
		if err != nil {
			return nil, unavailable("assembling kfree_skb program", err, nil)
		}
		if err := p.attach("skb", "kfree_skb", "lp_kfree_skb", insns); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// attach loads insns as a tracepoint program and attaches it to group:name.
// Everything it opens is recorded in p so that Close releases it.
func (p *Probe) attach(group, name, progName string, insns asm.Instructions) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         progName,
		Type:         ebpf.TracePoint,
		License:      progLicense,
		Instructions: insns,
	})
	if err != nil {
		return unavailable("loading "+name+" program", err, bpfHint)
	}
	p.progs = append(p.progs, prog)

	// link.Tracepoint finds tracefs itself (any tracefs in mountinfo), which
	// is why Start mounts it first.
	l, err := link.Tracepoint(group, name, prog, nil)
	if err != nil {
		return unavailable("attaching to tracepoint "+group+":"+name, err, bpfHint)
	}
	p.links = append(p.links, l)
	p.attached = append(p.attached, group+":"+name)
	return nil
}

// Read returns the totals since Start, summed over all CPUs. It costs one
// map lookup syscall per counter.
func (p *Probe) Read() (Counters, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.counters == nil {
		return Counters{}, errors.New("linkprobe: probe is closed")
	}
	var sums [numSlots]uint64
	var perCPU []uint64
	for slot := range sums {
		if err := p.counters.Lookup(uint32(slot), &perCPU); err != nil {
			return Counters{}, fmt.Errorf("reading counter %d: %w", slot, err)
		}
		for _, v := range perCPU {
			sums[slot] += v
		}
	}
	return Counters{
		Retransmits:      sums[slotRetransmits],
		RetransmitsToHub: sums[slotRetransmitsToHub],
		Drops:            sums[slotDrops],
	}, nil
}

// Attached lists the tracepoints ("group:name") the probe is attached to.
func (p *Probe) Attached() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.attached)
}

// Close detaches the programs and frees the map. It is safe to call twice.
func (p *Probe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	// Links first, so no program runs against a map being torn down.
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	for _, prog := range p.progs {
		errs = append(errs, prog.Close())
	}
	if p.counters != nil {
		errs = append(errs, p.counters.Close())
	}
	p.links, p.progs, p.counters, p.attached = nil, nil, nil, nil
	return errors.Join(errs...)
}

// retransmitProgram counts every event and, when hubPort is set, the events
// whose dport is hubPort.
func retransmitProgram(m *ebpf.Map, f *eventFormat, hubPort uint16) (asm.Instructions, error) {
	insns := asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1)} // ctx survives helper calls in R6
	insns = append(insns, increment(m, slotRetransmits)...)
	if hubPort != 0 {
		off, err := f.loadOffset("dport", 2)
		if err != nil {
			return nil, err
		}
		insns = append(insns,
			asm.LoadMem(asm.R1, asm.R6, off, asm.Half),
			asm.JNE.Imm(asm.R1, int32(hubPort), "exit"),
		)
		insns = append(insns, increment(m, slotRetransmitsToHub)...)
	}
	return append(insns, exit()...), nil
}

// dropProgram counts events whose protocol is IPv4 or IPv6.
func dropProgram(m *ebpf.Map, f *eventFormat) (asm.Instructions, error) {
	off, err := f.loadOffset("protocol", 2)
	if err != nil {
		return nil, err
	}
	count := increment(m, slotDrops)
	count[0] = count[0].WithSymbol("count")
	insns := asm.Instructions{
		asm.LoadMem(asm.R1, asm.R1, off, asm.Half),
		asm.JEq.Imm(asm.R1, ethPIP, "count"),
		asm.JNE.Imm(asm.R1, ethPIPv6, "exit"),
	}
	insns = append(insns, count...)
	return append(insns, exit()...), nil
}

// increment emits counters[slot]++ on this CPU, as one atomic add. The
// slot is per-CPU, but a plain load/add/store still lost counts: a program
// runs with migration disabled, not always preemption, and a kfree_skb in a
// softirq can run this program on the same CPU between another run's load
// and store (the likely cause of TestProbeCountsRetransmissions counting
// 60 drops of 61 once in CI).
func increment(m *ebpf.Map, slot int64) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -4, slot, asm.Word), // key on the stack
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
	}
}

func exit() asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"), asm.Return()}
}

// checkCapabilities fails early, with a plain message, when the process
// obviously cannot load tracepoint programs. It is only a first filter: in a
// user namespace the capabilities below count for nothing, and the bpf()
// syscalls then fail with EPERM, reported with a hint by unavailable.
func checkCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 has two 32-bit words
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil // cannot tell; let the syscalls decide
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF) && has(unix.CAP_PERFMON) {
		return nil
	}
	return errors.New("needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), which this process does not have")
}

// tracefsDir returns a directory where tracefs is mounted, mounting it if
// needed and allowed.
func tracefsDir(dir string) (string, error) {
	if dir != "" {
		return dir, ensureTracefs(dir)
	}
	err := ensureTracefs(defaultTracefs)
	if err == nil {
		return defaultTracefs, nil
	}
	// Old kernels and some containers only expose it inside debugfs.
	if isTracefs(debugTracefs) {
		return debugTracefs, nil
	}
	return "", err
}

func ensureTracefs(dir string) error {
	if isTracefs(dir) {
		return nil
	}
	if err := unix.Mount("tracefs", dir, "tracefs", 0, ""); err != nil {
		return fmt.Errorf("tracefs is not mounted at %s and mounting it failed: %w", dir, err)
	}
	return nil
}

// isTracefs reports whether dir is tracefs (or, on kernels before 4.1, the
// tracing directory of debugfs). statfs needs no read access to dir itself.
func isTracefs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && (st.Type == unix.TRACEFS_MAGIC || st.Type == unix.DEBUGFS_MAGIC)
}

func readFormat(dir, group, name string) (*eventFormat, error) {
	path := filepath.Join(dir, "events", group, name, "format")
	fh, err := os.Open(path)
	if err != nil {
		return nil, err // already names the path
	}
	defer fh.Close()
	f, err := parseFormat(fh)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return f, nil
}

// unavailable wraps err in ErrUnavailable with the step that failed and,
// when hint recognises the error, the privilege that is probably missing.
func unavailable(step string, err error, hint func(error) string) error {
	var h string
	if hint != nil {
		if h = hint(err); h != "" {
			h = " (" + h + ")"
		}
	}
	return fmt.Errorf("%w: %s: %w%s", ErrUnavailable, step, err, h)
}

func bpfHint(err error) string {
	var verr *ebpf.VerifierError
	switch {
	case errors.As(err, &verr):
		return "" // a rejected program, not a privilege problem; the log says why
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "needs CAP_BPF and CAP_PERFMON in the host's user namespace"
	case errors.Is(err, ebpf.ErrNotSupported):
		return "kernel too old"
	case errors.Is(err, fs.ErrNotExist):
		return "tracepoint missing from this kernel"
	}
	return ""
}

func mountHint(err error) string {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "mounting tracefs needs CAP_SYS_ADMIN"
	case errors.Is(err, unix.ENODEV):
		return "kernel built without tracefs"
	}
	return ""
}

func formatHint(err error) string {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return "tracefs is readable only by root"
	case errors.Is(err, fs.ErrNotExist):
		return "tracepoint missing from this kernel"
	}
	return ""
}
