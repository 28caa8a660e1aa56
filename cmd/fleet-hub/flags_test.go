package main

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/edgefleet/fleet/internal/version"
)

// Every flag keeps the name and default it had under the standard flag
// package: manifests, docs, the demo and the benchmarks pass them.
func TestFlagsKeepTheirNamesAndDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	want := map[string]string{
		"metrics-bind-address":               ":8443",
		"metrics-secure":                     "true",
		"health-probe-bind-address":          ":9440",
		"pprof-bind-address":                 "",
		"leader-elect":                       "true",
		"leader-election-id":                 "fleet-hub-leader.edgefleet.io",
		"leader-election-namespace":          "",
		"leader-elect-lease-duration":        "15s",
		"leader-elect-renew-deadline":        "10s",
		"leader-elect-retry-period":          "2s",
		"namespace":                          "",
		"watch-filter":                       "",
		"concurrency":                        "10",
		"sync-period":                        "10m0s",
		"graceful-shutdown-timeout":          "30s",
		"enable-http2":                       "false",
		"version":                            "false",
		"gateway-bind-address":               ":7443",
		"hub-namespace":                      "fleet-system",
		"gateway-dns-names":                  "[]", // pflag's empty list
		"gateway-ips":                        "[]",
		"gateway-advertise-url":              "",
		"client-cert-validity":               "2160h0m0s",
		"max-concurrent-handshakes":          "1024",
		"max-concurrent-tls-handshakes":      "0",
		"max-tls-handshakes-per-source":      "0",
		"max-pending-connections":            "0",
		"max-pending-connections-per-source": "0",
		"max-connections":                    "0",
		"max-connections-per-source":         "0",
		"rotation-overlap":                   "10m0s",
		"max-concurrent-enrollments":         "16",
		"last-seen-interval":                 "5m0s",
		"disconnect-grace":                   "30s",
		"wave-status-delay":                  "1m0s",
		"release-cache-dir":                  "",
		"release-max-transfers":              "32",
		"release-bandwidth":                  "67108864",
		"disable-gateway":                    "false",
		"enroll-rate":                        "20",
		"enroll-burst":                       "50",
		"link-degraded-retransmits":          "10",
		"link-degraded-rtt":                  "1.5s",
		"session-mux":                        "hubmux",
		"min-agent-protocol":                 "1",
		"proxy-bind-address":                 ":7444",
		"proxy-advertise-url":                "",
		"proxy-peer-address":                 "",
		"proxy-max-tunnels":                  "4096",
		"runtime-extension-bind-address":     ":9444",
		"runtime-extension-service":          "fleet-hub-runtime-extension",
		"runtime-extension-dns-names":        "[]",
		"host-access-bind-address":           ":9445",
		"host-access-service":                "fleet-hub-host-access",
		"kube-api-qps":                       "100",
		"kube-api-burst":                     "200",
		"gc-percent":                         "25",
		// controller-runtime's
		"kubeconfig":           "",
		"zap-devel":            "true",
		"zap-encoder":          "",
		"zap-log-level":        "",
		"zap-stacktrace-level": "",
		"zap-time-encoding":    "",
	}
	fs := newRootCommand().Flags()
	for name, def := range want {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("fleet-hub has no --%s", name)
			continue
		}
		if f.DefValue != def && !strings.HasPrefix(name, "zap-") {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, def)
		}
	}

	dev := map[string]string{
		"data-dir":              ".fleet",
		"reset":                 "false",
		"gateway-bind-address":  "127.0.0.1:7443",
		"gateway-advertise-url": "",
		"gateway-ips":           "[]",
		"gateway-dns-names":     "[]",
		"proxy-bind-address":    "127.0.0.1:7444",
		"proxy-advertise-url":   "",
		"hub-namespace":         "fleet-system",
		"metrics-bind-address":  "0",
		"bin-dir":               defaultBinDir(),
		"zap-log-level":         "",
	}
	devFlags := newDevCommand().Flags()
	for name, def := range dev {
		f := devFlags.Lookup(name)
		if f == nil {
			t.Errorf("fleet-hub dev has no --%s", name)
			continue
		}
		if f.DefValue != def && !strings.HasPrefix(name, "zap-") {
			t.Errorf("dev --%s defaults to %q, want %q", name, f.DefValue, def)
		}
	}
}

// execute runs the fleet-hub command line args and returns its output.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := execute(t, args...)
		if err != nil || out != version.Version+"\n" {
			t.Errorf("fleet-hub %s: %q, %v; want %q", strings.Join(args, " "), out, err, version.Version+"\n")
		}
	}
}

func TestDevHelp(t *testing.T) {
	out, err := execute(t, "dev", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fleet-hub dev runs a local management cluster", "--data-dir", "--bin-dir", "--reset", "--zap-log-level"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet-hub dev --help lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--leader-elect") {
		t.Errorf("fleet-hub dev --help shows the hub's flags:\n%s", out)
	}
}

// Mistakes in the command line are usage errors (exit status 2), found
// before the hub looks for a cluster.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, `unknown command "serve"`},
		{[]string{"dev", "extra"}, `unknown command "extra"`},
		{[]string{"--concurrency=many"}, "--concurrency"},
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"--gateway-ips", "localhost"}, "--gateway-ips"},
		{[]string{"--max-connections=-1"}, "must not be negative"},
		{[]string{"--max-concurrent-enrollments=-1"}, "must not be negative (got 1024, 0 and -1)"},
		{[]string{"--disconnect-grace=-1s"}, "--disconnect-grace and --wave-status-delay must not be negative"},
		{[]string{"--gc-percent=0"}, "--gc-percent must be at least 1"},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps and --kube-api-burst must be positive"},
		{[]string{"--session-mux=smux"}, `--session-mux: hubmux: unknown kind "smux"`},
		{[]string{"--min-agent-protocol=9"}, `--min-agent-protocol must be a version this hub speaks, 1–2 (got 9)`},
		{[]string{"--proxy-peer-address=10.0.0.7"}, `--proxy-peer-address: "10.0.0.7" is not host:port`},
		{[]string{"--proxy-peer-address=:7444"}, `names no host another replica could dial (set the pod IP)`},
		{[]string{"--proxy-peer-address=0.0.0.0:7444"}, `names no host another replica could dial`},
		{[]string{"--proxy-peer-address=10.0.0.7:proxy"}, `bad port`},
	} {
		_, err := execute(t, tc.args...)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("fleet-hub %s: %v; want a usage error with %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// The gateway's lists are comma-separated, blanks around the commas and
// empty items ignored, as before they were pflag lists.
func TestGatewayLists(t *testing.T) {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse([]string{"--gateway-dns-names", "hub.example.com, gw.example.com,", "--gateway-ips", "127.0.0.1, ::1"}); err != nil {
		t.Fatal(err)
	}
	if got := trimList(o.gateway.DNSNames); strings.Join(got, " ") != "hub.example.com gw.example.com" {
		t.Errorf("--gateway-dns-names: %q", got)
	}
	if ips := o.gateway.IPs; len(ips) != 2 || !ips[0].Equal(net.IPv4(127, 0, 0, 1)) || !ips[1].Equal(net.IPv6loopback) {
		t.Errorf("--gateway-ips: %v", ips)
	}
}
