package facts

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/edgefleet/fleet/internal/version"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// Read gathers what the hub should know about the host under root. Files
// come from the root directory so a sandboxed agent reports its sandbox.
func Read(root string) infrav1.HostFacts {
	f := infrav1.HostFacts{
		Arch:         runtime.GOARCH,
		CPUs:         int32(runtime.NumCPU()),
		AgentVersion: version.Version,
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "hostname")); err == nil {
		f.Hostname = strings.TrimSpace(string(b))
	}
	if f.Hostname == "" {
		f.Hostname, _ = os.Hostname()
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc", "machine-id")); err == nil {
		f.MachineID = strings.TrimSpace(string(b))
	}
	f.OS = osPrettyName(root)
	f.MemoryBytes = memTotal()
	return f
}

func osPrettyName(root string) string {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		s := bufio.NewScanner(bytes.NewReader(b))
		for s.Scan() {
			if v, ok := strings.CutPrefix(s.Text(), "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return runtime.GOOS
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			fields := strings.Fields(v)
			if len(fields) > 0 {
				kb, _ := strconv.ParseInt(fields[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// Addresses lists the host's global unicast addresses and its hostname.
func Addresses(hostname string) infrav1.MachineAddresses {
	var out infrav1.MachineAddresses
	ifaces, _ := net.Interfaces()
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			out = append(out, infrav1.MachineAddress{Type: infrav1.MachineInternalIP, Address: ipn.IP.String()})
			if len(out) >= 16 {
				break
			}
		}
	}
	if hostname != "" {
		out = append(out, infrav1.MachineAddress{Type: infrav1.MachineHostName, Address: hostname})
	}
	return out
}
