package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
)

// systemctl is the part of systemctl that kubeadm and operators use
// (daemon-reload, start, stop, restart, is-active, is-enabled, status),
// spoken to unitd over the system bus. unitd answers when installed as
// "systemctl" ahead of the real one on PATH, which refuses to work without
// systemd as PID 1.
func systemctl(args []string, stdout, stderr io.Writer) int {
	var verb string
	var units []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "-"): // --no-pager, -q and the like change nothing here; options with values are not supported
		case verb == "":
			verb = a
		default:
			if !strings.Contains(a, ".") {
				a += ".service"
			}
			units = append(units, a)
		}
	}
	if verb != "daemon-reload" && len(units) == 0 {
		fmt.Fprintf(stderr, "systemctl (unitd): too few arguments: %q needs a unit\n", verb)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "systemctl (unitd): the host's service manager is not reachable: %v\n", err)
		return 1
	}
	defer conn.Close()
	switch verb {
	case "daemon-reload":
		if err := conn.ReloadContext(ctx); err != nil {
			fmt.Fprintf(stderr, "systemctl (unitd): %v\n", err)
			return 1
		}
		return 0
	case "start", "stop", "restart", "try-restart":
		return jobs(ctx, conn, verb, units, stderr)
	case "is-active", "is-enabled", "status":
		return query(ctx, conn, verb, units, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "systemctl (unitd): %q is not supported here; daemon-reload, start, stop, restart, is-active, is-enabled and status are\n", verb)
		return 1
	}
}

func jobs(ctx context.Context, conn *sddbus.Conn, verb string, units []string, stderr io.Writer) int {
	code := 0
	for _, u := range units {
		if verb == "try-restart" && !active(ctx, conn, u) {
			continue // try-restart leaves a stopped unit stopped
		}
		done := make(chan string, 1)
		var err error
		switch verb {
		case "start":
			_, err = conn.StartUnitContext(ctx, u, "replace", done)
		case "stop":
			_, err = conn.StopUnitContext(ctx, u, "replace", done)
		default:
			_, err = conn.RestartUnitContext(ctx, u, "replace", done)
		}
		if err == nil {
			select {
			case res := <-done:
				if res != "done" {
					err = fmt.Errorf("job %s", res)
				}
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "Failed to %s %s: %v\n", verb, u, err)
			code = 1
		}
	}
	return code
}

// query answers with systemctl's words and exit codes: 0 when every unit
// is active (enabled), 3 when one is not, 4 when one does not exist.
func query(ctx context.Context, conn *sddbus.Conn, verb string, units []string, stdout, stderr io.Writer) int {
	statuses, err := conn.ListUnitsByNamesContext(ctx, units)
	if err != nil {
		fmt.Fprintf(stderr, "systemctl (unitd): %v\n", err)
		return 1
	}
	code := 0
	for _, s := range statuses {
		loaded := s.LoadState == "loaded"
		switch verb {
		case "is-active":
			fmt.Fprintln(stdout, s.ActiveState)
			if s.ActiveState != "active" {
				code = 3
			}
		case "is-enabled":
			// A unit the image ships is enabled: unitd has no [Install] state.
			if loaded {
				fmt.Fprintln(stdout, "enabled")
			} else {
				fmt.Fprintln(stdout, "not-found")
				code = 4
			}
		default:
			fmt.Fprintf(stdout, "● %s - %s\n     Loaded: %s\n     Active: %s (%s)\n", s.Name, s.Description, s.LoadState, s.ActiveState, s.SubState)
			switch {
			case !loaded:
				fmt.Fprintf(stdout, "Unit %s could not be found.\n", s.Name)
				code = 4
			case s.ActiveState != "active" && code == 0:
				code = 3
			}
		}
	}
	return code
}

func active(ctx context.Context, conn *sddbus.Conn, unit string) bool {
	st, err := conn.ListUnitsByNamesContext(ctx, []string{unit})
	return err == nil && len(st) == 1 && st[0].ActiveState == "active"
}
