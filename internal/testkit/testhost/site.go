package testhost

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Site is an edge site behind NAT: a network namespace holding a bridge
// (the site's LAN) with the router's address on it and no route out. Hosts
// plug into the bridge; the only way out is a forwarder that carries
// connections from the LAN to one address outside, like a NAT router that
// lets agents dial home and nothing dial in.
type Site struct {
	// Name is the site's network namespace (/run/netns/<Name>).
	Name string
	// Router is the router's address on the LAN; hosts route through it.
	Router string

	lan   string // the first three octets of the LAN, e.g. "10.99.0"
	mu    sync.Mutex
	hosts int
	lns   []net.Listener
	conns map[net.Conn]bool // both ends of every forwarded connection
	// restored is closed when the uplink is up; CutUplink replaces it
	// with an open one.
	restored chan struct{}
	held     int // connections waiting at the cut

	// routeMu orders the route changes of hosts that join and leave.
	routeMu sync.Mutex
	members []podRange // hosts on the LAN whose pod ranges are routed
}

// NewSite makes a site whose LAN is lan.0/24 (lan such as "10.99.0"), with
// the router at lan.1.
func NewSite(name, lan string) (*Site, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if ip := net.ParseIP(lan + ".1"); ip == nil || ip.To4() == nil || !ip.IsPrivate() {
		return nil, fmt.Errorf("site LAN %q: want the first three octets of a private IPv4 /24, such as 10.99.0", lan)
	}
	up := make(chan struct{})
	close(up)
	s := &Site{Name: name, Router: lan + ".1", lan: lan, conns: map[net.Conn]bool{}, restored: up}
	if err := record(Record{Kind: "site", Name: name, NetNS: name}); err != nil {
		return nil, err
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	err := ipAll(
		[]string{"netns", "add", name},
		[]string{"-n", name, "link", "set", "lo", "up"},
		[]string{"-n", name, "link", "add", "lan0", "type", "bridge"},
		[]string{"-n", name, "addr", "add", s.Router + "/24", "dev", "lan0"},
		[]string{"-n", name, "link", "set", "lan0", "up"},
	)
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("making site %s: %w", name, err)
	}
	return s, nil
}

// Path is the site's network namespace file.
func (s *Site) Path() string { return "/run/netns/" + s.Name }

// nextAddr hands out the LAN addresses lan.10, lan.11, … to hosts.
func (s *Site) nextAddr() (string, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hosts >= 200 {
		return "", 0, errors.New("the site's LAN is full (200 hosts)")
	}
	n := s.hosts
	s.hosts++
	return fmt.Sprintf("%s.%d", s.lan, 10+n), n, nil
}

// plug makes a host's network namespace with an eth0 on the site's LAN,
// left for the host to configure.
func (s *Site) plug(name, netns string) error {
	_ = exec.Command("ip", "netns", "del", netns).Run()
	outer := "v" + shortHash(name)
	return ipAll(
		[]string{"netns", "add", netns},
		[]string{"-n", netns, "link", "set", "lo", "up"},
		[]string{"link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", netns},
		[]string{"link", "set", outer, "netns", s.Name},
		[]string{"-n", s.Name, "link", "set", outer, "master", "lan0", "up"},
	)
}

// podRange is a host's pod range, reached through its LAN address.
type podRange struct{ netns, addr, cidr string }

// join routes h's pod range through h on every other host of the site,
// and theirs through them on h, as a host-gateway CNI (flannel's host-gw)
// would: pods on different hosts reach each other over the LAN.
func (s *Site) join(h podRange) error {
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	// A member first, so that leave takes back whatever routes a failure
	// half-way left on the others.
	others := slices.Clone(s.members)
	s.members = append(s.members, h)
	for _, m := range others {
		if err := ipAll(
			[]string{"-n", h.netns, "route", "replace", m.cidr, "via", m.addr, "dev", "eth0"},
			[]string{"-n", m.netns, "route", "replace", h.cidr, "via", h.addr, "dev", "eth0"},
		); err != nil {
			return fmt.Errorf("routing pods between %s and %s: %w", h.netns, m.netns, err)
		}
	}
	return nil
}

// leave takes h's pod range off the other hosts of the site.
func (s *Site) leave(h podRange) {
	s.routeMu.Lock()
	defer s.routeMu.Unlock()
	i := slices.Index(s.members, h)
	if i < 0 {
		return
	}
	s.members = slices.Delete(s.members, i, i+1)
	for _, m := range s.members {
		// A host already gone took its routes with its namespace.
		_ = exec.Command("ip", "-n", m.netns, "route", "del", h.cidr, "via", h.addr).Run()
	}
}

// podCIDR is the pod range of the site's n-th host.
func podCIDR(n int) string { return fmt.Sprintf("10.244.%d.0/24", 10+n) }

// cniConfig is the CNI configuration a host's pods get their addresses
// from: a bridge and host-local addresses in its own range.
func cniConfig(cidr string) string {
	return fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "fleet-testhost", "plugins": [{"type": "bridge", "bridge": "cni0",
 "isGateway": true, "ipMasq": false, "hairpinMode": true,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
`, cidr)
}

// Forward listens on addr inside the site (the router's address and a
// port, say) and carries each connection to target outside: the site's
// NAT router, outbound only. It returns the address it listens on.
func (s *Site) Forward(addr, target string) (string, error) {
	var ln net.Listener
	if err := s.Inside(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return "", fmt.Errorf("site %s: listening on %s: %w", s.Name, addr, err)
	}
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.splice(c, target)
		}
	}()
	return ln.Addr().String(), nil
}

// splice carries one connection to target until either end closes it or
// the site does.
func (s *Site) splice(c net.Conn, target string) {
	defer c.Close()
	if !s.uplinkUp() {
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	if !s.track(c, up) {
		return
	}
	defer s.untrack(c, up)
	go func() {
		if s.pipe(up, c) {
			_ = up.(*net.TCPConn).CloseWrite()
			return
		}
		_, _ = c.Close(), up.Close()
	}()
	s.pipe(c, up)
}

// pipe copies src to dst through the uplink: true when src ended, false
// when a write failed or the uplink was cut meanwhile.
func (s *Site) pipe(dst, src net.Conn) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 || err != nil {
			// Not even the end of a stream passes a cut uplink.
			if !s.uplinkUp() {
				return false
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			return true
		}
	}
}

// uplinkUp waits while the uplink is cut: true if it was up all along,
// false once it is back after a cut (a connection that tried to pass
// then is dead: each end has given up on it, or will get a reset).
func (s *Site) uplinkUp() bool {
	s.mu.Lock()
	restored := s.restored
	select {
	case <-restored:
		s.mu.Unlock()
		return true
	default:
	}
	s.held++
	s.mu.Unlock()
	<-restored
	s.mu.Lock()
	s.held--
	s.mu.Unlock()
	return false
}

// CutUplink cuts the site off, as a dead uplink does: nothing passes either
// way and nobody is told, so each side finds out by its own timeouts; new
// connections reach the router and get no further. RestoreUplink ends it.
func (s *Site) CutUplink() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.restored:
		s.restored = make(chan struct{})
	default:
	}
}

// RestoreUplink ends a cut: traffic passes again, and each connection
// that tried to pass during the cut is closed.
func (s *Site) RestoreUplink() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.restored:
	default:
		close(s.restored)
	}
}

// track notes a connection's ends so Close can cut them; false once the
// site is closed.
func (s *Site) track(cs ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	for _, c := range cs {
		s.conns[c] = true
	}
	return true
}

func (s *Site) untrack(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		delete(s.conns, c)
	}
}

// Inside runs fn on a thread that has entered the site's network
// namespace; sockets fn makes stay there.
func (s *Site) Inside(fn func() error) error { return insideNetNS(s.Path(), fn) }

// Close stops the forwarders and removes the site's namespace, and with
// it the bridge and the site ends of its hosts' links.
func (s *Site) Close() error {
	s.mu.Lock()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	// The hub must see its sessions through the site end, as when a
	// site's router goes away.
	for c := range s.conns {
		_ = c.Close()
	}
	s.lns, s.conns = nil, nil
	s.mu.Unlock()
	s.RestoreUplink()
	var errs []error
	if out, err := exec.Command("ip", "netns", "del", s.Name).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", s.Name, err, strings.TrimSpace(string(out))))
	}
	errs = append(errs, forget("site", s.Name))
	return errors.Join(errs...)
}

// insideNetNS runs fn on a locked thread moved into the namespace at path.
func insideNetNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread stays locked if it could not be put back: it then dies
		// with this goroutine instead of serving others in the namespace.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("leaving %s: %w", path, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func ipAll(cmds ...[]string) error {
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// checkName keeps names usable as hostnames, namespace and cgroup names.
func checkName(name string) error {
	if len(name) == 0 || len(name) > 40 {
		return fmt.Errorf("name %q: want 1 to 40 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("name %q: want lower-case letters, digits and '-'", name)
		}
	}
	return nil
}
