package firstboot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/atomicfile"
)

// Paths under Options.Root.
const (
	ConfigPath   = "etc/fleet-agent/config.yaml"
	TokenPath    = "etc/fleet-agent/token"
	hostnamePath = "etc/hostname"
	machineIDPth = "etc/machine-id"
)

// The labels of the file systems a configuration is looked for on.
const (
	// FleetLabel holds fleet-agent/config.yaml and/or fleet-agent/token.
	FleetLabel = "FLEET"
	// NoCloudLabel is cloud-init's NoCloud seed (user-data, meta-data).
	NoCloudLabel = "CIDATA"
)

// maxSeedFile bounds every file read from a seed.
const maxSeedFile = 64 << 10

// Options says where the box's parts are; the defaults are a real box's.
type Options struct {
	// Root is the root of the box (default /).
	Root string
	// Cmdline is the kernel command line (the caller reads /proc/cmdline).
	Cmdline string
	// ByLabel is the directory of file systems by label
	// (default /dev/disk/by-label).
	ByLabel string
	// Mount mounts a device read-only on dir; Unmount undoes it.
	Mount   func(device, dir string) error
	Unmount func(dir string) error
	// SetHostname sets the running system's hostname.
	SetHostname func(name string) error
	// Log hears one line per thing done or skipped.
	Log func(format string, args ...any)
}

// Result says what Run did.
type Result struct {
	// Source names where the configuration came from ("" when none).
	Source string
	// Wrote lists the files written, relative to Root.
	Wrote []string
	// Hostname is the hostname set, "" when the box's was kept.
	Hostname string
}

// seed is what one source provides.
type seed struct {
	source   string
	config   []byte // a whole config.yaml
	hub, pin string // from the kernel command line
	token    string
	hostname string
}

func (s seed) empty() bool {
	return s.config == nil && s.hub == "" && s.pin == "" && s.token == "" && s.hostname == ""
}

// Run looks for a seed and writes what the box lacks: the agent's config,
// its token file, its hostname. Files already there are left alone, so it
// is safe on every boot. Everything is checked before anything is written:
// a malformed seed writes nothing.
func Run(o Options) (Result, error) {
	o = o.withDefaults()
	var res Result
	s, err := o.find()
	if err != nil {
		return res, err
	}
	res.Source = s.source
	p, err := o.plan(s)
	if err != nil {
		return res, err
	}
	for _, f := range p.files {
		if err := writeFile(o.path(f.path), f.content, f.mode); err != nil {
			return res, err
		}
		res.Wrote = append(res.Wrote, f.path)
	}
	if p.hostname != "" {
		if err := o.SetHostname(p.hostname); err != nil {
			return res, fmt.Errorf("setting the hostname to %s: %w", p.hostname, err)
		}
		res.Hostname = p.hostname
	}
	return res, nil
}

type file struct {
	path    string
	content []byte
	mode    os.FileMode
}

type plan struct {
	files    []file
	hostname string
}

// plan decides what to write: the config and token file when the box has
// none, the hostname when the image left it empty.
func (o Options) plan(s seed) (plan, error) {
	var p plan
	if !exists(o.path(ConfigPath)) {
		cfg, err := s.configFile()
		if err != nil {
			return p, fmt.Errorf("%s: %w", s.source, err)
		}
		if cfg != nil {
			p.files = append(p.files, file{ConfigPath, cfg, 0o600})
		} else {
			o.Log("no configuration found (kernel command line, file systems %s and %s); fleet-agent stays inactive until /%s exists",
				FleetLabel, NoCloudLabel, ConfigPath)
		}
	}
	if s.token != "" {
		if !validToken(s.token) {
			return p, fmt.Errorf("%s: the token is not <id>.<secret> (kubectl fleet token create prints one)", s.source)
		}
		if !exists(o.path(TokenPath)) {
			p.files = append(p.files, file{TokenPath, []byte(s.token + "\n"), 0o600})
		}
	}
	name, err := o.hostname(s)
	if err != nil {
		return p, err
	}
	if name != "" {
		p.files = append(p.files, file{hostnamePath, []byte(name + "\n"), 0o644})
		p.hostname = name
	}
	return p, nil
}

func (o Options) withDefaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.ByLabel == "" {
		o.ByLabel = "/dev/disk/by-label"
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	return o
}

func (o Options) path(rel string) string { return filepath.Join(o.Root, rel) }

// find returns the first source that says anything about fleet: the
// kernel command line, then FLEET, then CIDATA.
func (o Options) find() (seed, error) {
	s, err := parseCmdline(o.Cmdline)
	if err != nil || !s.empty() {
		return s, err
	}
	for _, label := range []string{FleetLabel, NoCloudLabel, strings.ToLower(NoCloudLabel)} {
		dev := filepath.Join(o.ByLabel, label)
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		s, err := o.readLabelled(label, dev)
		if err != nil {
			return s, fmt.Errorf("file system %s (%s): %w", label, dev, err)
		}
		if !s.empty() {
			return s, nil
		}
		o.Log("file system %s has no fleet-agent settings", label)
	}
	return seed{}, nil
}

func (o Options) readLabelled(label, dev string) (seed, error) {
	dir, err := os.MkdirTemp("", "fleet-firstboot-")
	if err != nil {
		return seed{}, err
	}
	defer os.Remove(dir)
	if err := o.Mount(dev, dir); err != nil {
		return seed{}, fmt.Errorf("mounting it read-only: %w", err)
	}
	defer func() {
		if err := o.Unmount(dir); err != nil {
			o.Log("unmounting %s: %v", dir, err)
		}
	}()
	if label == FleetLabel {
		return readFleetDir(dir)
	}
	return readNoCloud(dir)
}

// readFleetDir reads fleet-agent/config.yaml and fleet-agent/token: the
// layout of /etc/fleet-agent, copied onto a stick.
func readFleetDir(dir string) (seed, error) {
	s := seed{source: "file system " + FleetLabel}
	cfg, err := readBounded(filepath.Join(dir, "fleet-agent", "config.yaml"))
	if err != nil {
		return s, err
	}
	tok, err := readBounded(filepath.Join(dir, "fleet-agent", "token"))
	if err != nil {
		return s, err
	}
	s.config, s.token = cfg, strings.TrimSpace(string(tok))
	return s, nil
}

// readBounded reads a file of at most maxSeedFile bytes; a missing file
// is nil.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSeedFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", filepath.Base(path), err)
	}
	if len(b) > maxSeedFile {
		return nil, fmt.Errorf("%s is larger than %d KiB", filepath.Base(path), maxSeedFile>>10)
	}
	return b, nil
}

// configFile is the config.yaml the seed gives, checked as the agent
// would check it; nil when the seed has none.
func (s seed) configFile() ([]byte, error) {
	b := s.config
	if b == nil {
		if s.hub == "" && s.pin == "" {
			return nil, nil
		}
		var err error
		if b, err = yaml.Marshal(agent.Config{Hub: s.hub, CACertHash: s.pin}); err != nil {
			return nil, err
		}
	}
	var keys map[string]any
	if err := yaml.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("config.yaml: %w", err)
	}
	if keys["token"] == nil && keys["tokenFile"] == nil {
		b = append(append([]byte(nil), b...), []byte("\ntokenFile: /"+TokenPath+"\n")...)
	}
	cfg, err := agent.ParseConfig(b)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("config.yaml: %w", err)
	}
	return b, nil
}

// hostname is the name to give the box, "" to keep its own: a box whose
// image left /etc/hostname empty (or "localhost") gets the seed's name or
// one made from its machine-id.
func (o Options) hostname(s seed) (string, error) {
	cur, _ := os.ReadFile(o.path(hostnamePath))
	if c := strings.TrimSpace(string(cur)); c != "" && c != "localhost" {
		return "", nil
	}
	if s.hostname != "" {
		if !hostnameRE.MatchString(s.hostname) {
			return "", fmt.Errorf("%s: hostname %q is not a DNS label (lower-case letters, digits, '-', at most 63)", s.source, s.hostname)
		}
		return s.hostname, nil
	}
	id, err := os.ReadFile(o.path(machineIDPth))
	if err != nil {
		return "", fmt.Errorf("no hostname, and no machine-id to make one from: %w", err)
	}
	mid := strings.TrimSpace(string(id))
	if !machineIDRE.MatchString(mid) {
		return "", fmt.Errorf("no hostname, and /%s is %q, not a machine-id (systemd writes it at first boot)", machineIDPth, mid)
	}
	return "edge-" + mid[:12], nil
}

var (
	hostnameRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	machineIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)
	tokenRE     = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
)

// validToken checks the token's shape (enrolltoken's, which the agent does
// not import: it would bring the core API types into the binary).
func validToken(t string) bool { return tokenRE.MatchString(t) }

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// writeFile writes atomically: a power cut leaves the old file or the new.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, b, mode)
}
