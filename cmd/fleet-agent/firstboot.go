package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/edgefleet/fleet/pkg/agent/firstboot"
)

// firstBoot configures the agent from a seed beside the image (the kernel
// command line, a FLEET file system, a NoCloud seed) and names a box that
// has no hostname; fleet-agent-firstboot.service runs it before the agent.
func firstBoot(args []string) error {
	fs := flag.NewFlagSet("fleet-agent firstboot", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "fleet-agent firstboot writes /etc/fleet-agent/config.yaml and /etc/fleet-agent/token from\n"+
			"the kernel command line (fleet.hub=, fleet.ca-cert-hash=, fleet.token=, fleet.hostname=), a file system\n"+
			"labelled FLEET (fleet-agent/config.yaml, fleet-agent/token) or a NoCloud seed labelled CIDATA, and sets a\n"+
			"hostname made from the machine-id when the image has none. It never overwrites a file; see docs/EDGE-IMAGE.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	root := fs.String("root", "/", "Root of the box.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("reading the kernel command line: %w", err)
	}
	res, err := firstboot.Run(firstboot.Options{
		Root:    *root,
		Cmdline: string(cmdline),
		Mount: func(dev, dir string) error {
			out, err := exec.Command("mount", "-o", "ro,nodev,nosuid,noexec", dev, dir).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
			}
			return nil
		},
		Unmount:     func(dir string) error { return unix.Unmount(dir, 0) },
		SetHostname: func(name string) error { return unix.Sethostname([]byte(name)) },
		Log:         func(format string, a ...any) { fmt.Printf(format+"\n", a...) },
	})
	if err != nil {
		return err
	}
	if res.Source != "" {
		fmt.Printf("found fleet-agent settings on the %s\n", res.Source)
	}
	for _, f := range res.Wrote {
		fmt.Printf("wrote /%s\n", f)
	}
	if res.Hostname != "" {
		fmt.Printf("hostname set to %s\n", res.Hostname)
	}
	return nil
}
