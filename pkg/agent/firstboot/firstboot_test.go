package firstboot

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	pin   = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	token = "abcdef.0123456789abcdef"
	mid   = "0123456789abcdef0123456789abcdef"
)

// box is a box's root with a machine-id and an empty /etc/hostname (as
// the image ships), and labelled file systems as directories that the
// fake mount binds.
type box struct {
	t        *testing.T
	opts     Options
	labels   map[string]string // device → directory with its files
	mounted  map[string]string
	hostname string
}

func newBox(t *testing.T) *box {
	b := &box{t: t, labels: map[string]string{}, mounted: map[string]string{}}
	root := t.TempDir()
	write(t, filepath.Join(root, machineIDPth), mid+"\n")
	write(t, filepath.Join(root, hostnamePath), "")
	byLabel := t.TempDir()
	b.opts = Options{Root: root, ByLabel: byLabel,
		Mount: func(dev, dir string) error {
			src, ok := b.labels[dev]
			if !ok {
				return errors.New("no such device")
			}
			// A bind mount stand-in: the seed's files appear under dir.
			if err := os.Remove(dir); err != nil {
				return err
			}
			b.mounted[dir] = dev
			return os.Symlink(src, dir)
		},
		Unmount: func(dir string) error {
			delete(b.mounted, dir)
			return os.Remove(dir)
		},
		SetHostname: func(n string) error { b.hostname = n; return nil },
	}
	return b
}

// label makes a file system with that label holding files.
func (b *box) label(name string, files map[string]string) {
	dev := filepath.Join(b.opts.ByLabel, name)
	write(b.t, dev, "")
	dir := b.t.TempDir()
	for p, c := range files {
		write(b.t, filepath.Join(dir, p), c)
	}
	b.labels[dev] = dir
}

func (b *box) read(rel string) string {
	c, err := os.ReadFile(filepath.Join(b.opts.Root, rel))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(c)
}

func write(t *testing.T, p, c string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKernelCommandLineConfiguresTheAgent(t *testing.T) {
	b := newBox(t)
	b.opts.Cmdline = "BOOT_IMAGE=/vmlinuz root=PARTUUID=x ro fleet.hub=https://hub.example.com:7443 fleet.ca-cert-hash=" +
		strings.ToUpper(pin) + " fleet.token=" + token + " quiet"
	res, err := Run(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != "kernel command line" {
		t.Errorf("source %q", res.Source)
	}
	cfg := b.read(ConfigPath)
	for _, want := range []string{"hub: https://hub.example.com:7443", "caCertHash: " + pin, "tokenFile: /etc/fleet-agent/token"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.yaml lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, token) {
		t.Errorf("the token is in config.yaml, want it only in the token file:\n%s", cfg)
	}
	if got := b.read(TokenPath); got != token+"\n" {
		t.Errorf("token file %q", got)
	}
	if fi, err := os.Stat(filepath.Join(b.opts.Root, TokenPath)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v %v, want 0600", fi.Mode(), err)
	}
	// No hostname given: one from the machine-id, on disk and set.
	if b.hostname != "edge-"+mid[:12] || b.read(hostnamePath) != "edge-"+mid[:12]+"\n" {
		t.Errorf("hostname set %q, /etc/hostname %q", b.hostname, b.read(hostnamePath))
	}
}

// A second boot (or a box configured another way) changes nothing.
func TestNothingThereIsOverwritten(t *testing.T) {
	b := newBox(t)
	write(t, filepath.Join(b.opts.Root, ConfigPath), "hub: https://mine\n")
	write(t, filepath.Join(b.opts.Root, TokenPath), "mine\n")
	write(t, filepath.Join(b.opts.Root, hostnamePath), "pos-1\n")
	b.opts.Cmdline = "fleet.hub=https://hub.example.com fleet.ca-cert-hash=" + pin + " fleet.token=" + token + " fleet.hostname=other"
	res, err := Run(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Wrote) != 0 || res.Hostname != "" || b.hostname != "" {
		t.Errorf("wrote %v, hostname %q/%q", res.Wrote, res.Hostname, b.hostname)
	}
	if b.read(ConfigPath) != "hub: https://mine\n" || b.read(TokenPath) != "mine\n" || b.read(hostnamePath) != "pos-1\n" {
		t.Error("a file that was there was changed")
	}
}

// An image baked with the hub and pin takes only the token from a stick.
func TestFleetPartitionGivesTheToken(t *testing.T) {
	b := newBox(t)
	write(t, filepath.Join(b.opts.Root, ConfigPath), "hub: https://hub.example.com\ncaCertHash: "+pin+"\ntokenFile: /etc/fleet-agent/token\n")
	b.label(FleetLabel, map[string]string{"fleet-agent/token": token + "\n"})
	res, err := Run(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != "file system FLEET" || b.read(TokenPath) != token+"\n" {
		t.Errorf("source %q, token %q", res.Source, b.read(TokenPath))
	}
	if len(b.mounted) != 0 {
		t.Errorf("left mounted: %v", b.mounted)
	}
}

func TestFleetPartitionGivesTheConfig(t *testing.T) {
	b := newBox(t)
	b.label(FleetLabel, map[string]string{"fleet-agent/config.yaml": "hub: https://hub.example.com\ncaCertHash: " + pin + "\nresyncInterval: 30s\n"})
	if _, err := Run(b.opts); err != nil {
		t.Fatal(err)
	}
	if cfg := b.read(ConfigPath); !strings.Contains(cfg, "resyncInterval: 30s") || !strings.Contains(cfg, "tokenFile: /etc/fleet-agent/token") {
		t.Errorf("config.yaml:\n%s", cfg)
	}
}

func TestNoCloudSeed(t *testing.T) {
	b := newBox(t)
	b.label("cidata", map[string]string{
		"meta-data": "instance-id: store-12\nlocal-hostname: store-12-pos\n",
		"user-data": "#cloud-config\nwrite_files:\n- path: /etc/fleet-agent/config.yaml\n  encoding: b64\n  content: " +
			b64("hub: https://hub.example.com\ncaCertHash: "+pin+"\n") +
			"\n- path: /etc/fleet-agent/token\n  permissions: '0600'\n  content: " + token + "\n- path: /etc/motd\n  content: hi\nruncmd:\n- [ls]\n",
	})
	res, err := Run(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != "NoCloud seed CIDATA" || b.read(TokenPath) != token+"\n" || !strings.Contains(b.read(ConfigPath), "hub: https://hub.example.com") {
		t.Errorf("source %q, token %q, config %q", res.Source, b.read(TokenPath), b.read(ConfigPath))
	}
	if b.hostname != "store-12-pos" {
		t.Errorf("hostname %q, want meta-data's local-hostname", b.hostname)
	}
	if _, err := os.Stat(filepath.Join(b.opts.Root, "etc/motd")); err == nil {
		t.Error("wrote a file outside /etc/fleet-agent")
	}
}

// Bad input is refused in words, and nothing at all is written.
func TestBadSeedsWriteNothing(t *testing.T) {
	for name, c := range map[string]struct {
		cmdline string
		fleet   map[string]string
		want    string
	}{
		"unknown setting": {cmdline: "fleet.hubb=https://x", want: "unknown setting fleet.hubb"},
		"http hub":        {cmdline: "fleet.hub=http://hub fleet.ca-cert-hash=" + pin, want: "must be an https:// URL"},
		"no pin":          {cmdline: "fleet.hub=https://hub", want: "--ca-cert-hash is required"},
		"bad token":       {cmdline: "fleet.hub=https://hub fleet.ca-cert-hash=" + pin + " fleet.token=nope", want: "not <id>.<secret>"},
		"bad hostname":    {cmdline: "fleet.hub=https://hub fleet.ca-cert-hash=" + pin + " fleet.hostname=Store_1", want: "not a DNS label"},
		"unknown key":     {fleet: map[string]string{"fleet-agent/config.yaml": "hub: https://hub\ncaCertHash: " + pin + "\nhubb: x\n"}, want: "unknown field"},
		"too big":         {fleet: map[string]string{"fleet-agent/token": strings.Repeat("x", maxSeedFile+1)}, want: "larger than 64 KiB"},
	} {
		t.Run(name, func(t *testing.T) {
			b := newBox(t)
			b.opts.Cmdline = c.cmdline
			if c.fleet != nil {
				b.label(FleetLabel, c.fleet)
			}
			_, err := Run(b.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
			for _, p := range []string{ConfigPath, TokenPath} {
				if _, err := os.Stat(filepath.Join(b.opts.Root, p)); err == nil {
					t.Errorf("%s written", p)
				}
			}
			if b.read(hostnamePath) != "" || b.hostname != "" {
				t.Errorf("hostname changed to %q", b.read(hostnamePath))
			}
		})
	}
}

// Two boxes from one image get different names: the machine-id decides.
func TestClonedImagesGetTheirOwnHostnames(t *testing.T) {
	a, b := newBox(t), newBox(t)
	write(t, filepath.Join(b.opts.Root, machineIDPth), "fedcba9876543210fedcba9876543210\n")
	for _, x := range []*box{a, b} {
		if _, err := Run(x.opts); err != nil {
			t.Fatal(err)
		}
	}
	if a.hostname == "" || a.hostname == b.hostname {
		t.Errorf("hostnames %q and %q", a.hostname, b.hostname)
	}
	// An uninitialised machine-id is not a name.
	c := newBox(t)
	write(t, filepath.Join(c.opts.Root, machineIDPth), "uninitialized\n")
	if _, err := Run(c.opts); err == nil || !strings.Contains(err.Error(), "not a machine-id") {
		t.Errorf("error %v", err)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
