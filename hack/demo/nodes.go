package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
)

// The node modes of --nodes.
const (
	nodesAuto      = "auto"
	nodesReal      = "real"
	nodesSimulated = "simulated"
)

// The demo's site: its network namespace and LAN, and the port on its
// router that carries the agents' connections to the hub's gateway.
const (
	siteName   = "fleet-demo"
	siteLAN    = "10.98.0"
	routerPort = "8443"
)

// agentUnit is fleet-agent's systemd unit on a real host.
const agentUnit = "fleet-agent.service"

// chooseNodes settles --nodes=auto, setting up what real hosts need where
// it can, and says in one line what runs and why.
func (d *demo) chooseNodes(ctx context.Context) error {
	if d.nodes == nodesSimulated {
		d.step("node simulator: --nodes=simulated")
		return nil
	}
	why, err := d.setUpRealNodes(ctx)
	switch {
	case err != nil:
		return err
	case why != "" && d.nodes == nodesReal:
		return errors.New(why)
	case why != "":
		d.nodes = nodesSimulated
		d.step("node simulator: %s", why)
	default:
		d.nodes = nodesReal
		d.step("real edge hosts: boxes booted from the edge image (systemd, containerd, kubelet, fleet-agent) in namespaces of their own behind a NAT router; " +
			"they end with the demo, so each run starts the fleet over")
	}
	return nil
}

func (d *demo) real() bool { return d.nodes == nodesReal }

// routerURL is the gateway as the site's hosts reach it: through their
// router, which forwards to the hub.
func routerURL() string { return "https://" + net.JoinHostPort(siteLAN+".1", routerPort) }

// sweep removes the hosts and sites a killed run left (their processes,
// mounts, links, namespaces and cgroups), and refuses while another demo
// holds the site.
func (d *demo) sweep() error {
	swept, err := testhost.Sweep()
	for _, s := range swept {
		d.step("removed what a killed run left: %s", s)
	}
	if err != nil {
		return err
	}
	if pid := testhost.Owner("site", siteName); pid != 0 && pid != os.Getpid() {
		return fmt.Errorf("another demo (pid %d) runs the real edge hosts of site %s: stop it first", pid, siteName)
	}
	return nil
}

// image is the edge image's root file system the real hosts boot (make
// test-image, which make demo runs).
func (d *demo) image() string { return filepath.Join(d.binDir, "edge-image", "rootfs") }

// startSite makes the site with its NAT to the gateway.
func (d *demo) startSite() error {
	s, err := testhost.NewSite(siteName, siteLAN)
	if err != nil {
		return err
	}
	d.site = s
	if _, err := s.Forward(net.JoinHostPort(s.Router, routerPort), d.gateway); err != nil {
		return err
	}
	return nil
}

// makeRealHosts boots the hosts on the site at once from the edge image.
func (d *demo) makeRealHosts(ctx context.Context) error {
	dir := filepath.Join(d.dataDir, "demo", "hosts")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	d.step("booting %d edge hosts on site %s (LAN %s.0/24; the router forwards :%s to the hub's gateway) from the edge image in %s: systemd, containerd with the control-plane images preloaded, the kubelet and fleet-agent, each box in namespaces of its own",
		len(d.hosts), siteName, siteLAN, routerPort, d.image())
	for _, h := range d.hosts {
		if pid := testhost.Owner("host", h.name); pid != 0 && pid != os.Getpid() {
			return fmt.Errorf("another process (pid %d) runs edge host %s: stop it first", pid, h.name)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(d.hosts))
	for i, h := range d.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			th, err := d.site.NewHost(ctx, testhost.HostOptions{Name: h.name, Image: d.image(), Dir: dir})
			if err != nil {
				errs[i] = err
				return
			}
			h.th = th
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// closeReal stops every host (its services and pods) and removes it, then
// the site.
func (d *demo) closeReal() {
	var wg sync.WaitGroup
	for _, h := range d.hosts {
		if h.th == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.th.Close(); err != nil {
				fmt.Fprintf(d.out, "removing host %s: %v\n", h.name, err)
			}
			h.th = nil
		}()
	}
	wg.Wait()
	if d.site != nil {
		if err := d.site.Close(); err != nil {
			fmt.Fprintf(d.out, "removing site %s: %v\n", siteName, err)
		}
		d.site = nil
	}
}

// modeFile records which nodes the fleet in --data-dir was made with: a
// fleet of simulated hosts means nothing to real ones, nor the reverse.
func (d *demo) modeFile() string { return filepath.Join(d.dataDir, "demo", "nodes") }

// startOverIfNeeded forgets the fleet in --data-dir with --reset, when
// real hosts run (the last run's ended with it), or when the last run made
// another kind of fleet (simulated hosts and this one real ones, say).
func (d *demo) startOverIfNeeded() error {
	last, err := os.ReadFile(d.modeFile())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	entries, _ := os.ReadDir(d.dataDir)
	switch {
	case d.reset:
		d.step("forgetting the fleet in %s (--reset)", d.dataDir)
	case len(entries) == 0:
		return d.writeMode()
	case d.real():
		d.step("forgetting the fleet of the last run in %s: real hosts end with the demo", d.dataDir)
	case len(last) > 0 && string(last) != d.fleetKind():
		d.step("forgetting the fleet in %s: it was made as %q, this demo makes %q", d.dataDir, last, d.fleetKind())
	default:
		return d.writeMode()
	}
	if err := d.stopLeftovers(); err != nil {
		return err
	}
	if err := d.forget(); err != nil {
		return err
	}
	return d.writeMode()
}

// stopLeftovers stops the etcd and kube-apiserver a killed run's hub left
// on --data-dir, unless a hub or agent still runs there (then forget
// refuses, naming them).
func (d *demo) stopLeftovers() error {
	pids, err := localkube.Processes(d.dataDir)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if b := filepath.Base(exe); b != "etcd" && b != "kube-apiserver" {
			return nil
		}
	}
	return localkube.StopLeftovers(d.dataDir, 10*time.Second)
}

func (d *demo) writeMode() error {
	if err := os.MkdirAll(filepath.Dir(d.modeFile()), 0o700); err != nil {
		return err
	}
	return os.WriteFile(d.modeFile(), []byte(d.fleetKind()), 0o600)
}

// fleetKind names what the demo makes: the nodes, and for simulated ones
// the control plane, so a kept fleet of another shape is started over.
func (d *demo) fleetKind() string {
	if d.real() {
		return d.nodes
	}
	return d.nodes + " with KubeadmControlPlane"
}
