package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/kubestage"
	"github.com/edgefleet/fleet/pkg/agent/kubeupgrade"
	"github.com/edgefleet/fleet/pkg/agent/linkprobe"
	"github.com/edgefleet/fleet/pkg/agent/logring"
	"github.com/edgefleet/fleet/pkg/agent/provision"
	"github.com/edgefleet/fleet/pkg/agent/sdnotify"
	"github.com/edgefleet/fleet/pkg/agent/selfupdate"
	"github.com/edgefleet/fleet/pkg/agent/units"
	"github.com/edgefleet/fleet/pkg/release"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(version.Version)
		return
	}
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "install":
		err = install(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "uninstall":
		err = uninstall(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "firstboot":
		err = firstBoot(os.Args[2:])
	default:
		err = run(os.Args[1:])
	}
	if errors.Is(err, agent.ErrRestartForRelease) {
		err = restartForRelease()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet-agent: %v\n", err)
		if errors.Is(err, agent.ErrTrialExpired) {
			os.Exit(selfupdate.ExitTrialExpired)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fleet-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "fleet-agent joins this machine to a fleet hub and keeps it provisioned.\n\n"+
			"Usage:\n  fleet-agent [flags]             run the agent\n  fleet-agent enroll [flags]      enroll and exit (first boot)\n"+
			"  fleet-agent install --root DIR --hub URL --ca-cert-hash sha256:… [--token-file F]   put the agent into an image\n"+
			"  fleet-agent uninstall --root DIR [--purge]\n"+
			"  fleet-agent firstboot [--root /]  configure from the kernel command line, a FLEET or a CIDATA file system\n"+
			"  fleet-agent version\n\n"+
			"Settings come from --config (default %s); flags win.\n\nFlags:\n", agent.DefaultConfigFile)
		fs.PrintDefaults()
	}
	enrollOnly := false
	if len(args) > 0 && args[0] == "enroll" {
		enrollOnly, args = true, args[1:]
	}
	configFile := fs.String("config", agent.DefaultConfigFile, "Configuration file.")
	// The settings below override the config file's when given; configFrom
	// reads them by name.
	fs.String("hub", "", "Hub gateway URL, e.g. https://hub.example.com:8443.")
	fs.String("token", "", "One-time enrollment token <id>.<secret> (prefer --token-file: flags show in ps).")
	fs.String("token-file", "", "File holding the enrollment token.")
	fs.String("ca-cert-hash", "", "Pin of the hub CA: sha256:<hex of its SubjectPublicKeyInfo>.")
	fs.String("state-dir", "", "Where identity and state are kept (default /var/lib/fleet-agent).")
	fs.String("root-dir", "", "Root of the machine the agent manages (default /; tests and the demo use a sandbox).")
	fs.Duration("resync-interval", 0, "How often the full status is re-sent without changes (default 1m).")
	fs.Duration("certificates-check-interval", 0, "How often the control-plane certificates' expiry is read again and reported (default 24h).")
	fs.Duration("link-interval", 0, "Window of the link-health report (eBPF retransmission/drop counts, round-trip to the hub; default 1m); negative turns it off.")
	fs.String("release-roots", "", "File of the release root keys that sign the agent releases this host runs (default <root-dir>"+agent.DefaultReleaseRoots+"); never taken from the hub.")
	fs.Bool("sandbox", false, "Run bootstrap commands chrooted into --root-dir (tests and the local demo; needs root).")
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg, err := configFrom(fs, *configFile)
	if err != nil {
		return err
	}

	// The log goes to stderr (the journal, under systemd) and to a ring
	// the hub can read through the session (`kubectl fleet host logs`).
	ring := logring.New(0)
	zopts.DestWriter = io.MultiWriter(os.Stderr, ring)
	log := zap.New(zap.UseFlagOptions(&zopts)).WithName("fleet-agent")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if enrollOnly {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := agent.EnrollOnce(ctx, cfg); err != nil {
			return err
		}
		fmt.Println("enrolled")
		return nil
	}
	// A committed or trial release in the state directory runs instead
	// of this binary (docs/AGENT-RELEASES.md).
	releases := selfupdate.Store{Dir: filepath.Join(cfg.StateDir, "releases")}
	launcher := selfupdate.Launcher{Store: releases, Args: args, Systemd: underSystemd(), Installed: version.Version,
		Log: func(msg string, kv ...any) { log.Info(msg, kv...) }}
	if err := launcher.Launch(); err != nil {
		return err
	}
	return runAgent(ctx, cfg, log, ring, releases)
}

// restartForRelease starts the agent again so that the launcher runs the
// release now staged: systemd or a supervising launcher does that when
// this process exits; an installed binary that runs without either
// executes itself anew.
func restartForRelease() error {
	if underSystemd() || os.Getenv(selfupdate.EnvLaunched) != "" {
		os.Exit(0)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("restarting into the ordered release: %w", err)
	}
	return fmt.Errorf("restarting into the ordered release: %w", syscall.Exec(self, os.Args, os.Environ()))
}

// underSystemd tells that systemd runs this process as a service, and
// so starts it again when it exits.
func underSystemd() bool {
	return os.Getenv("INVOCATION_ID") != "" && os.Getppid() == 1
}

// configFrom reads the config file, lets the flags given on the command
// line win, and completes and validates the result.
func configFrom(fs *flag.FlagSet, file string) (agent.Config, error) {
	cfg, err := agent.LoadConfigFile(file)
	if err != nil {
		return cfg, err
	}
	fs.Visit(func(f *flag.Flag) {
		getter, ok := f.Value.(flag.Getter)
		if !ok {
			return // the logger's flags, read by zap
		}
		v := getter.Get()
		switch f.Name {
		case "hub":
			cfg.Hub = v.(string)
		case "token":
			cfg.Token = v.(string)
		case "token-file":
			cfg.TokenFile = v.(string)
		case "ca-cert-hash":
			cfg.CACertHash = v.(string)
		case "state-dir":
			cfg.StateDir = v.(string)
		case "root-dir":
			cfg.RootDir = v.(string)
		case "sandbox":
			cfg.Sandbox = v.(bool)
		case "release-roots":
			cfg.ReleaseRoots = v.(string)
		case "resync-interval":
			cfg.ResyncInterval = v.(time.Duration)
		case "certificates-check-interval":
			cfg.CertificatesCheckInterval = v.(time.Duration)
		case "link-interval":
			cfg.LinkInterval = v.(time.Duration)
		}
	})
	if err := cfg.Complete(); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

func runAgent(ctx context.Context, cfg agent.Config, log logr.Logger, ring *logring.Ring, releases selfupdate.Store) error {
	if v := os.Getenv(selfupdate.EnvRelease); v != "" {
		// A release the launcher started is the version its bundle signs.
		cfg.Version = v
	}
	log.Info("Starting fleet-agent", "version", cfg.Version, "binary", version.Version, "hub", cfg.Hub, "stateDir", cfg.StateDir)
	opts := provision.Options{Root: cfg.RootDir, StateDir: cfg.StateDir, Runner: provision.ShellRunner{Dir: cfg.RootDir}}
	if cfg.Sandbox {
		opts.Runner = provision.ChrootRunner{Root: cfg.RootDir, Path: "/opt/fleet/bin"}
	} else if filepath.Clean(cfg.RootDir) == "/" {
		// The host's own systemd restarts what the bootstrap reconfigured;
		// files written into another root are not its business.
		opts.Units = units.Restarter{}
	}
	opts.Log = func(msg string) { log.Info(msg) }
	for _, c := range cfg.ResetCommands {
		opts.ResetCommands = append(opts.ResetCommands, cloudconfig.Command{Shell: c})
	}
	a := agent.New(cfg, provision.New(opts), log)
	a.UseLogRing(ring)
	rel := agent.Releases{Store: releases, Running: cfg.Version, Installed: os.Getenv(selfupdate.EnvInstalled)}
	if rel.Installed == "" {
		rel.Installed = version.Version
	}
	var err error
	if rel.Roots, err = release.LoadRoots(cfg.ReleaseRoots); err != nil {
		rel.RootsProblem = err.Error()
		log.Info("No release root keys: this host runs no agent release the hub orders", "file", cfg.ReleaseRoots, "reason", err.Error())
	}
	a.UseReleases(rel)
	if sha := os.Getenv(selfupdate.EnvTrial); sha != "" {
		if t, ok := releases.Trial(); ok && t.SHA256 == sha {
			a.UseTrial(t.Version, t.Deadline, func() error { return releases.Commit(t.Slot, time.Now()) })
		}
	}
	if opts.Units != nil {
		// Only an agent that can restart the host's kubelet upgrades it.
		a.UseUpgrader(kubeupgrade.New(kubeupgrade.Options{Root: cfg.RootDir, StateDir: cfg.StateDir,
			Runner: opts.Runner, Units: opts.Units, Log: opts.Log}))
		a.UseStager(kubestage.New(kubestage.Options{Dir: filepath.Join(cfg.RootDir, kubeupgrade.DefaultStagingDir), Hub: a.ArchivesFromHub()}))
	}
	if cfg.LinkInterval > 0 {
		probe, err := linkprobe.Start(linkprobe.Options{HubPort: hubPort(cfg.Hub)})
		if err != nil {
			// Not fatal: an agent in a container or on an old kernel still
			// does its job and reports the round-trip time.
			log.Info("Link probe unavailable; reporting the round-trip time to the hub only", "reason", err.Error())
			a.UseLinkProbe(nil, err.Error())
		} else {
			defer probe.Close()
			log.Info("Link probe running", "tracepoints", probe.Attached())
			a.UseLinkProbe(probe, "")
		}
	}
	var notify sdnotify.Notifier
	a.OnStatus = notify.Status
	go notify.Watchdog(ctx, a.LastHealthy)
	defer notify.Stopping()
	return a.Run(ctx, func() {
		log.Info("Local initialisation done")
		notify.Status("starting: connecting to " + cfg.Hub)
		notify.Ready()
	})
}

// hubPort is the gateway port in the hub URL, to tell the agent's own
// retransmissions from the site's.
func hubPort(hub string) uint16 {
	u, err := url.Parse(hub)
	if err != nil {
		return 0
	}
	p := u.Port()
	if p == "" {
		return 443
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}
