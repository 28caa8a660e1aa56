package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/manifests/agent"
	fleetagent "github.com/edgefleet/fleet/pkg/agent"
)

// Paths inside an image root.
const (
	installBin     = "usr/bin/fleet-agent"
	installConfig  = "etc/fleet-agent/config.yaml"
	installToken   = "etc/fleet-agent/token"
	installUnit    = "lib/systemd/system/fleet-agent.service"
	installEnabled = "etc/systemd/system/multi-user.target.wants/fleet-agent.service"
	// The first-boot unit reads a seed beside the image (docs/EDGE-IMAGE.md).
	installFirstBootUnit    = "lib/systemd/system/fleet-agent-firstboot.service"
	installFirstBootEnabled = "etc/systemd/system/multi-user.target.wants/fleet-agent-firstboot.service"
)

// install writes fleet-agent into an image root (Packer, mkosi, debootstrap
// …): the binary, its configuration, its units and the symlinks that enable
// them. The token may be left out and dropped in at first boot as
// /etc/fleet-agent/token; without --hub and --ca-cert-hash the whole
// configuration comes at first boot (fleet-agent firstboot).
func install(args []string) error {
	fs := flag.NewFlagSet("fleet-agent install", flag.ContinueOnError)
	root := fs.String("root", "", "Image root to install into (required; / for this machine).")
	hub := fs.String("hub", "", "Hub gateway URL; leave out with --ca-cert-hash to configure at first boot.")
	pin := fs.String("ca-cert-hash", "", "Pin of the hub CA; leave out with --hub to configure at first boot.")
	tokenFile := fs.String("token-file", "", "A file holding the enrollment token to bake in; leave out to drop it in at first boot.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := fleetagent.Config{Hub: *hub, CACertHash: strings.ToLower(*pin), TokenFile: "/" + installToken}
	atFirstBoot := *hub == "" && *pin == ""
	if atFirstBoot && *tokenFile != "" {
		return errors.New("--token-file needs --hub and --ca-cert-hash")
	}
	if !atFirstBoot {
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	if *root == "" {
		return errors.New("--root is required (the image root, or / for this machine)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := copyFile(self, filepath.Join(*root, installBin), 0o755); err != nil {
		return fmt.Errorf("installing the binary: %w", err)
	}
	if !atFirstBoot {
		b, err := yaml.Marshal(cfg)
		if err != nil {
			return err
		}
		header := "# fleet-agent configuration (fleet-agent --help lists every setting; flags win).\n"
		if err := writeFile(filepath.Join(*root, installConfig), append([]byte(header), b...), 0o600); err != nil {
			return err
		}
	}
	if *tokenFile != "" {
		tok, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("reading --token-file: %w", err)
		}
		if err := writeFile(filepath.Join(*root, installToken), tok, 0o600); err != nil {
			return err
		}
	}
	for unit, enabled := range map[string]string{installUnit: installEnabled, installFirstBootUnit: installFirstBootEnabled} {
		content := agent.Unit
		if unit == installFirstBootUnit {
			content = agent.FirstBootUnit
		}
		if err := writeFile(filepath.Join(*root, unit), content, 0o644); err != nil {
			return err
		}
		link := filepath.Join(*root, enabled)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		_ = os.Remove(link)
		if err := os.Symlink("/"+unit, link); err != nil {
			return fmt.Errorf("enabling %s: %w", filepath.Base(unit), err)
		}
	}
	switch {
	case atFirstBoot:
		fmt.Printf("installed fleet-agent into %s (enabled; configured at first boot: docs/EDGE-IMAGE.md)\n", *root)
	case *tokenFile != "":
		fmt.Printf("installed fleet-agent into %s (enabled; token baked in)\n", *root)
	default:
		fmt.Printf("installed fleet-agent into %s (enabled; token to be dropped in at /%s)\n", *root, installToken)
	}
	return nil
}

// uninstall removes what install wrote; --purge also removes the agent's
// identity and state.
func uninstall(args []string) error {
	fs := flag.NewFlagSet("fleet-agent uninstall", flag.ContinueOnError)
	root := fs.String("root", "", "Image root to remove fleet-agent from (required).")
	purge := fs.Bool("purge", false, "Also remove /etc/fleet-agent and /var/lib/fleet-agent (the host's identity).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *root == "" {
		return errors.New("--root is required")
	}
	paths := []string{installEnabled, installUnit, installFirstBootEnabled, installFirstBootUnit, installBin}
	if *purge {
		paths = append(paths, "etc/fleet-agent", "var/lib/fleet-agent")
	}
	for _, p := range paths {
		if err := os.RemoveAll(filepath.Join(*root, p)); err != nil {
			return err
		}
	}
	fmt.Printf("removed fleet-agent from %s\n", *root)
	return nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}
