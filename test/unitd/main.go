package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/edgefleet/fleet/internal/testkit/unitd"
)

func main() {
	if filepath.Base(os.Args[0]) == "systemctl" {
		os.Exit(systemctl(os.Args[1:], os.Stdout, os.Stderr))
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "unitd: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("unitd", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: unitd --bus ADDRESS --log-dir DIR [--start UNITS] [--unit-path DIRS]\n\n"+
			"Plays systemd on a test host: serves org.freedesktop.systemd1 on the bus, runs units from unit files.\n\n")
		fs.PrintDefaults()
	}
	bus := fs.String("bus", "", "D-Bus address of the host's bus daemon, e.g. unix:path=/run/dbus/system_bus_socket.")
	logDir := fs.String("log-dir", "", "Directory for one output log per unit (<unit>.log).")
	start := fs.String("start", "", "Comma-separated units to start at once, in order (e.g. containerd.service,kubelet.service).")
	unitPath := fs.String("unit-path", strings.Join(unitd.DefaultUnitDirs, ":"), "Colon-separated unit directories, first wins.")
	busWait := fs.Duration("bus-wait", 30*time.Second, "How long to retry connecting to the bus.")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *bus == "" || *logDir == "" {
		fs.Usage()
		return errors.New("--bus and --log-dir are required")
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	logger := log.New(os.Stderr, "unitd: ", log.LstdFlags|log.Lmicroseconds)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	conn, err := connect(ctx, *bus, *busWait)
	if err != nil {
		return err
	}
	defer conn.Close()
	var dirs []string
	for _, d := range filepath.SplitList(*unitPath) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	m := unitd.New(dirs, *logDir, logger.Printf)
	if err := unitd.Serve(conn, m); err != nil {
		return err
	}
	logger.Printf("serving org.freedesktop.systemd1 on %s (units from %s, logs in %s)", *bus, strings.Join(dirs, ":"), *logDir)
	for _, u := range strings.Split(*start, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		// A failed start is logged (by m) and left to the unit's Restart=,
		// as systemd does at boot; it does not stop the others.
		if err := m.LoadError(u); err != nil {
			logger.Printf("not starting %s: %v", u, err)
			continue
		}
		_ = m.Start(u)
	}

	var result error
	select {
	case <-ctx.Done():
		logger.Printf("signal received, stopping every unit")
	case <-conn.Context().Done():
		result = fmt.Errorf("lost the bus %s: %w", *bus, context.Cause(conn.Context()))
		logger.Printf("%v; stopping every unit", result)
	}
	m.Shutdown()
	logger.Printf("all units stopped")
	return result
}

// connect retries until the bus daemon, which may start at the same time,
// answers.
func connect(ctx context.Context, addr string, wait time.Duration) (*dbus.Conn, error) {
	deadline := time.Now().Add(wait)
	for {
		conn, err := dbus.Connect(addr)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("connecting to the bus %s for %s: %w", addr, wait, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to the bus %s: %w", addr, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
