package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/version"
)

// Config is the agent's configuration: /etc/fleet-agent/config.yaml,
// overridden by flags.
type Config struct {
	// Hub is the hub gateway's base URL, e.g. https://hub.example.com:8443.
	Hub string `json:"hub"`
	// Token is a one-time enrollment token "<id>.<secret>". Only needed
	// until the host is enrolled (or to re-enroll after revocation).
	Token string `json:"token,omitempty"`
	// TokenFile holds the token instead, e.g. dropped in at first boot.
	TokenFile string `json:"tokenFile,omitempty"`
	// CACertHash pins the hub CA: "sha256:<hex of its SubjectPublicKeyInfo>".
	CACertHash string `json:"caCertHash"`
	// StateDir keeps identity and state (default /var/lib/fleet-agent).
	StateDir string `json:"stateDir,omitempty"`
	// RootDir is the root of the host the agent manages (default /); tests
	// and the demo point it at a sandbox.
	RootDir string `json:"rootDir,omitempty"`
	// ResyncInterval re-sends the full status even without changes.
	ResyncInterval time.Duration `json:"resyncInterval,omitempty"`
	// MaxBackoff caps the delay between reconnection attempts.
	MaxBackoff time.Duration `json:"maxBackoff,omitempty"`
	// CertificatesCheckInterval is how often the control-plane
	// certificates' expiry is read again (default 24h): renewed
	// certificates must show, and a KubeadmControlPlane rolls a machine
	// over by what is reported.
	CertificatesCheckInterval time.Duration `json:"certificatesCheckInterval,omitempty"`
	// ResetCommands undo a bootstrap when its Machine goes away, as shell
	// lines (default: kubeadm reset -f). Files the bootstrap wrote are
	// removed after them.
	ResetCommands []string `json:"resetCommands,omitempty"`
	// Sandbox runs every bootstrap command chrooted into RootDir in a
	// private mount namespace (tests and the local demo; needs root), with
	// /opt/fleet/bin first on PATH — where the demo's node simulator lives.
	Sandbox bool `json:"sandbox,omitempty"`
	// KeepAlive is the session ping interval; a link that stops answering
	// is given up after about KeepAlive plus the write timeout. The hub
	// does not ping: it closes a session silent for 4 × its own keepalive
	// (15 s by default), so this must stay at most 30 s.
	KeepAlive time.Duration `json:"keepAlive,omitempty"`
	// LinkInterval is the window over which link health (retransmissions,
	// drops, round-trip time to the hub) is measured and reported.
	LinkInterval time.Duration `json:"linkInterval,omitempty"`
	// ReleaseRoots is the file of release root keys installed with the
	// agent (default <root dir>/usr/share/fleet-agent/release-roots): the
	// agent runs only releases signed under one of them. Never from the
	// hub; without the file, every release the hub orders is refused.
	ReleaseRoots string `json:"releaseRoots,omitempty"`
	// Version is the release this agent reports (default the binary's):
	// load tests run agents of several releases in one process. It is
	// not read from the config file.
	Version string `json:"-"`
	// LocalAddr is the address connections to the hub are made from (an
	// IP, no port). Load tests spread thousands of agents over loopback
	// addresses with it; it is not read from the config file.
	LocalAddr string `json:"-"`
	// Dial, when set, makes the connections to the hub instead (load
	// tests spread agents over hub replicas with it); it is not read from
	// the config file.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error) `json:"-"`
}

// dialContext dials from LocalAddr when it is set.
func (c *Config) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.Dial != nil {
		return c.Dial(ctx, network, addr)
	}
	d := net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}
	if c.LocalAddr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(c.LocalAddr)}
	}
	return d.DialContext(ctx, network, addr)
}

// DefaultConfigFile is where the agent looks for its configuration.
const DefaultConfigFile = "/etc/fleet-agent/config.yaml"

// LoadConfigFile reads a config file; a missing file is an empty config.
func LoadConfigFile(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("reading config %s: %w", path, err)
	}
	c, err = ParseConfig(b)
	if err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a config file's contents; unknown keys are errors.
func ParseConfig(b []byte) (Config, error) {
	var f fileConfig
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return Config{}, fmt.Errorf("parsing: %w", err)
	}
	c := f.Config
	for _, d := range []struct {
		from *metav1.Duration
		to   *time.Duration
	}{{f.ResyncInterval, &c.ResyncInterval}, {f.MaxBackoff, &c.MaxBackoff}, {f.KeepAlive, &c.KeepAlive}, {f.LinkInterval, &c.LinkInterval},
		{f.CertificatesCheckInterval, &c.CertificatesCheckInterval}} {
		if d.from != nil {
			*d.to = d.from.Duration
		}
	}
	return c, nil
}

// fileConfig is Config as an operator writes it: durations in Go's
// notation ("30s", "1m"), which time.Duration's JSON form (nanoseconds)
// is not.
type fileConfig struct {
	Config
	ResyncInterval *metav1.Duration `json:"resyncInterval,omitempty"`
	MaxBackoff     *metav1.Duration `json:"maxBackoff,omitempty"`
	KeepAlive      *metav1.Duration `json:"keepAlive,omitempty"`
	LinkInterval   *metav1.Duration `json:"linkInterval,omitempty"`
	// CertificatesCheckInterval as a duration, e.g. "24h".
	CertificatesCheckInterval *metav1.Duration `json:"certificatesCheckInterval,omitempty"`
}

// DefaultReleaseRoots is where packages and images install the release
// root keys, under the host's root.
const DefaultReleaseRoots = "/usr/share/fleet-agent/release-roots"

var pinRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Complete fills defaults and reads the token file.
func (c *Config) Complete() error {
	if c.StateDir == "" {
		c.StateDir = "/var/lib/fleet-agent"
	}
	if c.RootDir == "" {
		c.RootDir = "/"
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = time.Minute
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Minute
	}
	if c.CertificatesCheckInterval == 0 {
		c.CertificatesCheckInterval = 24 * time.Hour
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.LinkInterval == 0 {
		c.LinkInterval = time.Minute
	}
	if c.Version == "" {
		c.Version = version.Version
	}
	if c.ReleaseRoots == "" {
		c.ReleaseRoots = filepath.Join(c.RootDir, DefaultReleaseRoots)
	}
	// The token file is read again at every enrollment attempt (it may be
	// dropped in after the agent started); here it must only be readable.
	if c.Token == "" && c.TokenFile != "" {
		if _, err := os.ReadFile(c.TokenFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reading token file: %w", err)
		}
	}
	c.CACertHash = strings.ToLower(strings.TrimSpace(c.CACertHash))
	return nil
}

// Validate says what is wrong, in words an operator can act on.
func (c *Config) Validate() error {
	var errs []error
	u, err := url.Parse(c.Hub)
	switch {
	case c.Hub == "":
		errs = append(errs, errors.New("--hub is required (e.g. https://hub.example.com:8443)"))
	case err != nil || u.Scheme != "https" || u.Host == "":
		errs = append(errs, fmt.Errorf("--hub %q must be an https:// URL", c.Hub))
	}
	if !pinRE.MatchString(c.CACertHash) {
		errs = append(errs, errors.New("--ca-cert-hash is required as sha256:<64 hex digits> (the hub logs it at start as caPin; see docs/PROTOCOL.md)"))
	}
	if c.KeepAlive < 0 || c.KeepAlive > MaxKeepAlive {
		errs = append(errs, fmt.Errorf("keepAlive %s must be between 0 (default 15s) and %s: the hub closes sessions silent for 60s", c.KeepAlive, MaxKeepAlive))
	}
	return errors.Join(errs...)
}

// MaxKeepAlive bounds the agent's ping interval: a hub (whose default
// idle timeout is 60 s) must hear from it at least twice per idle timeout.
const MaxKeepAlive = 30 * time.Second
