package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// What the machine lacks decides what is installed and what stands in the
// way of real hosts.
func TestPlanSetup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		missing    []string
		haveAptGet bool
		install    []string
		cannot     []string
	}{
		{name: "nothing missing", haveAptGet: true},
		{name: "a fresh Debian", haveAptGet: true,
			missing: []string{"nsenter", "unshare", "mmdebstrap", "sfdisk", "mkfs.ext4", "mkfs.vfat", "mcopy", "zstd", "/usr/sbin/nft"},
			install: []string{"util-linux", "mmdebstrap", "fdisk", "e2fsprogs", "dosfstools", "mtools", "zstd", "nftables"}},
		{name: "no apt-get", missing: []string{"mmdebstrap", "ip"},
			install: []string{"mmdebstrap", "iproute2"},
			cannot:  []string{"apt-get to install mmdebstrap iproute2 (only Debian and Ubuntu are set up by the demo)"}},
		{name: "not root, cgroup v2, no image", haveAptGet: true,
			missing: []string{"root", "cgroup v1 (this machine mounts cgroup v2 at /sys/fs/cgroup)", "nsenter", "/repo/bin/edge-image/rootfs"},
			install: []string{"util-linux"},
			cannot:  []string{"root", "cgroup v1 (this machine mounts cgroup v2 at /sys/fs/cgroup)", "/repo/bin/edge-image/rootfs (make test-image builds it)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planSetup(tc.missing, tc.haveAptGet)
			if !reflect.DeepEqual(p.install, tc.install) || !reflect.DeepEqual(p.cannot, tc.cannot) {
				t.Errorf("install %q, cannot %q; want %q, %q", p.install, p.cannot, tc.install, tc.cannot)
			}
			if len(p.why) != len(p.install) {
				t.Errorf("%d reasons for %d packages: %q", len(p.why), len(p.install), p.why)
			}
		})
	}
}

// The decision as the demo acts on it, with the machine's probing
// replaced: packages it installs (here through an apt-get that fails, so
// nothing else runs), refuses to install with --no-install, and what makes
// it fall back to the simulator, each said in one line.
func TestChooseNodes(t *testing.T) {
	fake := fakeAptGet(t, 100) // apt-get that fails: no test installs anything
	t.Setenv("PATH", fake.dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	lacking := func(m ...string) func() []string { return func() []string { return m } }
	for _, tc := range []struct {
		name, nodes string
		noInstall   bool
		missing     []string
		chosen      string   // the nodes chosen; "" for an error
		says        []string // in the one line printed, or in the error
		aptGet      string   // what apt-get was asked
	}{
		{name: "everything there", nodes: nodesAuto, chosen: nodesReal, says: []string{"==> real edge hosts: "}},
		{name: "simulated asked for", nodes: nodesSimulated, missing: []string{"root"}, chosen: nodesSimulated,
			says: []string{"==> node simulator: --nodes=simulated"}},
		{name: "no-install prints the command", nodes: nodesAuto, noInstall: true, missing: []string{"mmdebstrap", "/usr/sbin/nft"},
			chosen: nodesSimulated, says: []string{"==> node simulator: real edge hosts need mmdebstrap, /usr/sbin/nft and --no-install is set; install them with: apt-get update && apt-get install -y mmdebstrap nftables"}},
		{name: "no-install with real fails", nodes: nodesReal, noInstall: true, missing: []string{"zstd"},
			says: []string{"apt-get update && apt-get install -y zstd"}},
		{name: "cgroup v2 falls back", nodes: nodesAuto, missing: []string{"cgroup v1 (this machine mounts cgroup v2 at /sys/fs/cgroup)", "mmdebstrap"},
			chosen: nodesSimulated, says: []string{"==> node simulator: real edge hosts need cgroup v1 (this machine mounts cgroup v2 at /sys/fs/cgroup)\n"}},
		{name: "no image with real fails", nodes: nodesReal, missing: []string{"/x/bin/edge-image/rootfs"},
			says: []string{"real edge hosts need /x/bin/edge-image/rootfs (make test-image builds it)"}},
		{name: "install failure stops the demo", nodes: nodesAuto, missing: []string{"mmdebstrap", "ip"},
			says: []string{"==> installing mmdebstrap iproute2 from Debian for the real edge hosts (--no-install refuses): mmdebstrap: make test-image builds", "iproute2: the site",
				"apt-get update -qq: exit status 100", "E: Unable to locate package"},
			aptGet: "noninteractive update -qq\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, os.WriteFile(fake.log, nil, 0o600))
			var out strings.Builder
			d := &demo{out: &out, nodes: tc.nodes, noInstall: tc.noInstall, probe: lacking(tc.missing...)}
			err := d.chooseNodes(context.Background())
			said := out.String()
			if err != nil {
				said += err.Error()
			}
			switch {
			case tc.chosen == "" && err == nil:
				t.Errorf("chose %s, want an error", d.nodes)
			case tc.chosen != "" && err != nil:
				t.Errorf("failed: %v", err)
			case tc.chosen != "" && (d.nodes != tc.chosen || strings.Count(said, "\n") != 1):
				t.Errorf("chose %s saying %q; want %s in one line", d.nodes, said, tc.chosen)
			}
			for _, s := range tc.says {
				if !strings.Contains(said, s) {
					t.Errorf("says %q, want %q in it", said, s)
				}
			}
			if got, _ := os.ReadFile(fake.log); string(got) != tc.aptGet {
				t.Errorf("apt-get was asked %q, want %q", got, tc.aptGet)
			}
		})
	}
}

// The install step for real, through an apt-get on PATH that puts each
// package's commands on PATH as Debian's would: what the real probe
// (testhost.Missing) then finds missing, the demo installs, in one
// apt-get install, and it runs real hosts after.
func TestInstallThroughAptGet(t *testing.T) {
	image := filepath.Join(t.TempDir(), "rootfs")
	must(t, os.MkdirAll(filepath.Join(image, "sbin"), 0o755))
	must(t, os.WriteFile(filepath.Join(image, "sbin", "init"), nil, 0o755))
	fake := fakeAptGet(t, 0)
	// Only the fake apt-get and what it installs are on PATH: every
	// command the hosts need is missing until it has run.
	t.Setenv("PATH", fake.dir)
	probe := func() []string { return testhost.Missing(image) }
	for _, m := range probe() {
		if _, _, ok := testhost.DebianPackage(m); !ok || filepath.IsAbs(m) {
			// Root, cgroup v1 and the CNI plugins' files are this
			// machine's to have (.ci/run installs the plugins).
			if os.Getenv("CI") == "true" {
				t.Fatalf("this machine cannot run real hosts: %s", m)
			}
			t.Skipf("this machine cannot run real hosts: %s", m)
		}
	}
	var out strings.Builder
	d := &demo{out: &out, nodes: nodesAuto, probe: probe}
	must(t, d.chooseNodes(context.Background()))
	if d.nodes != nodesReal {
		t.Errorf("chose %s after the install:\n%s", d.nodes, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := "==> installing util-linux iproute2 mmdebstrap fdisk e2fsprogs dosfstools mtools zstd from Debian for the real edge hosts (--no-install refuses): "
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || !strings.HasPrefix(lines[1], "==> real edge hosts: ") {
		t.Errorf("the demo says:\n%s\nwant a line starting %q, then real edge hosts", out.String(), want)
	}
	for _, why := range []string{"boot in namespaces made with unshare", "network namespaces, links and routes", "edge image from Debian packages", "unpacks the root file system archive"} {
		if !strings.Contains(lines[0], why) {
			t.Errorf("the install line does not say %q", why)
		}
	}
	got, _ := os.ReadFile(fake.log)
	if string(got) != "noninteractive update -qq\nnoninteractive install -y -qq util-linux iproute2 mmdebstrap fdisk e2fsprogs dosfstools mtools zstd\n" {
		t.Errorf("apt-get was asked:\n%s", got)
	}
	if m := probe(); len(m) != 0 {
		t.Errorf("still missing after the install: %v", m)
	}
}

type aptGetStandIn struct{ dir, log string }

// fakeAptGet writes an apt-get into a directory of its own that logs its
// arguments, and on install puts the commands each Debian package gives
// next to itself; with a non-zero exit it fails as apt-get does on an
// unknown package.
func fakeAptGet(t *testing.T, exit int) aptGetStandIn {
	t.Helper()
	dir := t.TempDir()
	f := aptGetStandIn{dir: dir, log: filepath.Join(t.TempDir(), "apt-get.log")}
	script := `#!/bin/sh
echo "$DEBIAN_FRONTEND $*" >> ` + f.log + `
if [ ` + strconv.Itoa(exit) + ` != 0 ]; then echo "E: Unable to locate package" >&2; exit ` + strconv.Itoa(exit) + `; fi
[ "$1" = install ] || exit 0
for p in "$@"; do
	case $p in
	util-linux) cmds="nsenter unshare" ;;
	iproute2) cmds=ip ;;
	mmdebstrap) cmds=mmdebstrap ;;
	fdisk) cmds=sfdisk ;;
	e2fsprogs) cmds=mkfs.ext4 ;;
	dosfstools) cmds=mkfs.vfat ;;
	mtools) cmds=mcopy ;;
	zstd) cmds=zstd ;;
	*) cmds= ;;
	esac
	for c in $cmds; do printf '#!/bin/sh\n' > ` + dir + `/$c; /bin/chmod +x ` + dir + `/$c; done
done
`
	must(t, os.WriteFile(filepath.Join(dir, "apt-get"), []byte(script), 0o755))
	return f
}

// The set-up step `make demo` runs before it builds the images: it
// installs only Debian packages, says nothing of what the build makes
// next, and installs nothing with --no-install or --nodes=simulated.
func TestSetUpOnlyInstallsPackages(t *testing.T) {
	fake := fakeAptGet(t, 0)
	t.Setenv("PATH", fake.dir)
	for _, tc := range []struct {
		name      string
		nodes     string
		noInstall bool
		aptGet    string
	}{
		{"auto", nodesAuto, false, "noninteractive update -qq\nnoninteractive install -y -qq zstd\n"},
		{"no-install", nodesAuto, true, ""},
		{"simulated", nodesSimulated, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(fake.log)
			var out strings.Builder
			missing := []string{"zstd", "/work/bin/edge-image/rootfs"}
			d := &demo{out: &out, binDir: "/work/bin", nodes: tc.nodes, noInstall: tc.noInstall, probe: func() []string {
				if got, _ := os.ReadFile(fake.log); strings.Contains(string(got), "install") {
					return missing[1:]
				}
				return missing
			}}
			must(t, d.installPackages(context.Background()))
			got, _ := os.ReadFile(fake.log)
			if string(got) != tc.aptGet {
				t.Errorf("apt-get was asked %q, want %q", got, tc.aptGet)
			}
			if strings.Contains(out.String(), "edge-image") {
				t.Errorf("the set-up step speaks of what make test-image builds next:\n%s", out.String())
			}
		})
	}
}

// Where real hosts cannot run whatever is installed (not root, cgroup v2),
// the set-up step installs nothing; the demo's run then says why.
func TestSetUpOnlyInstallsNothingWhereHostsCannotRun(t *testing.T) {
	fake := fakeAptGet(t, 0)
	t.Setenv("PATH", fake.dir)
	for _, cannot := range []string{"root", "cgroup v1 (this machine mounts cgroup v2 at /sys/fs/cgroup)"} {
		var out strings.Builder
		d := &demo{out: &out, binDir: "/work/bin", nodes: nodesAuto, probe: func() []string { return []string{cannot, "zstd"} }}
		must(t, d.installPackages(context.Background()))
		if got, _ := os.ReadFile(fake.log); len(got) != 0 {
			t.Errorf("without %s, apt-get was asked %q", cannot, got)
		}
		if out.Len() != 0 {
			t.Errorf("without %s, the set-up step said %q", cannot, out.String())
		}
	}
}
