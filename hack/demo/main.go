package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
)

func main() {
	d := &demo{out: os.Stdout}
	d.probe = func() []string { return testhost.Missing(d.image()) }
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "demo runs the embedded fleet hub, local edge agents and a cluster on them.\n\nUsage:\n  demo [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&d.dataDir, "data-dir", ".fleet", "Where the fleet is kept (the hub's data, the hosts' sandboxes, logs).")
	fs.StringVar(&d.binDir, "bin-dir", "bin", "Directory with fleet-hub, fleet-agent, kubectl-fleet, fleet-nodesim, k8s/ and edge-image/ (the real hosts' image).")
	fs.StringVar(&d.nodes, "nodes", nodesAuto, "Edge hosts: real (kubeadm, kubelet and containerd in namespaces), simulated (sandboxes with the node simulator) or auto (real when this machine can run them).")
	fs.IntVar(&d.agents, "agents", 3, "Edge hosts to run (the first is the control plane, the rest workers).")
	fs.StringVar(&d.gateway, "gateway-bind-address", "127.0.0.1:7443", "Address of the hub's agent gateway.")
	fs.StringVar(&d.proxy, "proxy-bind-address", "127.0.0.1:7444", "Address of the hub's edge-reach proxy (real hosts), through which Cluster API and kubectl reach the edge cluster.")
	fs.StringVar(&d.kubernetesVersion, "kubernetes-version", "v1.36.3", "Kubernetes version of the demo cluster.")
	fs.StringVar(&d.kubeadmConfig, "kubeadm-config", filepath.Join("docs", "templates", "kubeadm-cgroupv1-test-hosts.yaml"), "kubeadm settings of real hosts on this machine (kubectl fleet create --kubeadm-config).")
	fs.BoolVar(&d.reset, "reset", false, "Start over: forget the fleet in --data-dir (real hosts always start over).")
	fs.BoolVar(&d.setUpOnly, "set-up-only", false, "Only install the Debian packages real edge hosts lack (none with --no-install or --nodes=simulated), then exit: `make demo` runs this before it builds the images and the edge image that need them.")
	fs.BoolVar(&d.noInstall, "no-install", false, "Install nothing: where real edge hosts lack Debian packages, print the command that installs them and run the node simulator (--nodes=auto) or fail (--nodes=real).")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if err := d.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d.setUpOnly {
		if err := d.installPackages(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "demo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	err := d.run(ctx, os.Stdin)
	d.shutdown()
	// After Ctrl-C, a step cut short (a kubectl fleet killed) is no error.
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func (d *demo) validate() error {
	if os.Geteuid() != 0 {
		return errors.New("the demo needs root: each edge host runs in namespaces of its own (try: sudo make demo)")
	}
	if d.agents < 2 {
		return fmt.Errorf("--agents must be at least 2 (one control plane and one worker), got %d", d.agents)
	}
	if d.nodes != nodesAuto && d.nodes != nodesReal && d.nodes != nodesSimulated {
		return fmt.Errorf("--nodes %q: want real, simulated or auto", d.nodes)
	}
	for _, b := range []string{"fleet-hub", "fleet-agent", "kubectl-fleet", "fleet-nodesim", "k8s/kube-apiserver", "k8s/etcd", "k8s/kubectl"} {
		if _, err := os.Stat(filepath.Join(d.binDir, b)); err != nil {
			return fmt.Errorf("%s is missing in %s: run `make demo`, which builds it", b, d.binDir)
		}
	}
	var err error
	if d.dataDir, err = filepath.Abs(d.dataDir); err != nil {
		return err
	}
	if d.kubeadmConfig, err = filepath.Abs(d.kubeadmConfig); err != nil {
		return err
	}
	if _, err := os.Stat(d.kubeadmConfig); err != nil && d.nodes != nodesSimulated {
		return fmt.Errorf("--kubeadm-config: %w (run the demo from the repository, or give the file)", err)
	}
	d.binDir, err = filepath.Abs(d.binDir)
	return err
}

// run brings everything up, then serves commands until ctx ends or the
// input says quit.
func (d *demo) run(ctx context.Context, in io.Reader) error {
	if err := d.chooseNodes(ctx); err != nil {
		return err
	}
	if d.real() {
		// Before forgetting the data dir: a killed run's hosts still run
		// from it.
		if err := d.sweep(); err != nil {
			return err
		}
	}
	if err := d.startOverIfNeeded(); err != nil {
		return err
	}
	if d.real() {
		// The site first: the hub's certificate names its router.
		if err := d.startSite(); err != nil {
			return err
		}
		if err := d.startHub(ctx); err != nil {
			return err
		}
	} else {
		// The workload API server first, and its kubeconfig Secret as soon
		// as the hub is up: Cluster API then never dials a stale address.
		if err := d.startWorkload(); err != nil {
			return err
		}
		if err := d.startHub(ctx); err != nil {
			return err
		}
		if err := d.writeWorkloadKubeconfig(ctx); err != nil {
			return err
		}
	}
	if err := d.startHosts(ctx); err != nil {
		return err
	}
	if err := d.createCluster(ctx); err != nil {
		return err
	}
	d.printNext()
	return d.serve(ctx, in)
}

func (d *demo) step(format string, args ...any) {
	fmt.Fprintf(d.out, "==> "+format+"\n", args...)
}

// serve reads commands until quit, the end of ctx, or a fatal error. At
// the end of its input it keeps running until ctx ends, so the demo can
// run with no terminal.
func (d *demo) serve(ctx context.Context, in io.Reader) error {
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(in)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-d.hubExited:
			return fmt.Errorf("the hub stopped: %v (its log: %s)", err, filepath.Join(d.dataDir, "hub.log"))
		case line, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if quit := d.command(ctx, strings.Fields(line)); quit {
				return nil
			}
		}
	}
}

func (d *demo) command(ctx context.Context, args []string) (quit bool) {
	if len(args) == 0 {
		return false
	}
	hostArg := func() *host {
		if len(args) != 2 {
			fmt.Fprintf(d.out, "usage: %s <host>, one of %s\n", args[0], d.hostNames())
			return nil
		}
		for _, h := range d.hosts {
			if h.name == args[1] {
				return h
			}
		}
		fmt.Fprintf(d.out, "no host %q; the hosts are %s\n", args[1], d.hostNames())
		return nil
	}
	var err error
	switch args[0] {
	case "quit", "exit":
		return true
	case "help":
		d.printCommands()
	case "hosts":
		err = d.kubectlFleet(ctx, "get", "hosts")
	case "describe":
		err = d.kubectlFleet(ctx, "describe", "cluster", clusterName)
	case "stop":
		if h := hostArg(); h != nil {
			how := "SIGTERM"
			if h.th != nil {
				how = "systemctl stop " + agentUnit + "; its node keeps running"
			}
			d.step("stopping the agent of %s (%s); the hub marks it disconnected 30 s after its connection closes, unless it comes back (--disconnect-grace)", h.name, how)
			err = h.stop(ctx)
		}
	case "start":
		if h := hostArg(); h != nil {
			d.step("starting the agent of %s again: same identity, no new enrollment", h.name)
			err = h.start(ctx)
		}
	case "restart-hub":
		d.step("restarting the embedded hub; the agents reconnect by themselves")
		if err = d.stopHub(); err == nil {
			err = d.startHub(ctx)
		}
	default:
		fmt.Fprintf(d.out, "unknown command %q\n", args[0])
		d.printCommands()
	}
	if err != nil {
		fmt.Fprintf(d.out, "error: %v\n", err)
	}
	return false
}

func (d *demo) printNext() {
	what, caveat := "edge agents in sandboxes with the node simulator", "\n"+simulatorCaveat
	if d.real() {
		what, caveat = "real edge hosts (kubeadm, kubelet, containerd)", ""
	}
	fmt.Fprintf(d.out, `
fleet is running on this machine: the hub, %d %s and cluster %q.%s

In another terminal:

  export KUBECONFIG=%s PATH=%s:%s:$PATH
  kubectl fleet get hosts                    # LAST-SEEN is refreshed every 5 min while connected
  kubectl fleet describe cluster %s
`, len(d.hosts), what, clusterName, caveat, d.kubeconfig(), d.binDir, filepath.Join(d.binDir, "k8s"), clusterName)
	if d.real() {
		fmt.Fprintf(d.out, `  kubectl fleet kubeconfig %s > %s   # done: reaches the cluster through the hub
  kubectl --kubeconfig %s get nodes -o wide
  kubectl --kubeconfig %s get pods -A
`, clusterName, d.workloadKubeconfig(), d.workloadKubeconfig(), d.workloadKubeconfig())
	}
	fmt.Fprintf(d.out, `  kubectl fleet scale cluster %s --worker-machines N   # fewer: hosts are reset and go back to the pool
  kubectl fleet delete cluster %s --wait    # every host is reset and Available again

Logs: %s (hub), %s (agents)
`, clusterName, clusterName, filepath.Join(d.dataDir, "hub.log"), d.agentLogs())
	d.printCommands()
}

func (d *demo) printCommands() {
	again := "`make demo` again brings the same fleet back"
	if d.real() {
		again = "the hosts end with it; `make demo` again starts over"
	}
	fmt.Fprintf(d.out, `
Commands here (type and press Enter):
  stop <host>     stop a host's agent: the hub marks it disconnected 30 s later
  start <host>    start it again: it reconnects with the identity it has, no new enrollment
  restart-hub     stop and start the embedded hub: the fleet is kept, the agents reconnect
  hosts           kubectl fleet get hosts
  describe        kubectl fleet describe cluster %s
  quit            stop everything (Ctrl-C too); %s
Hosts: %s
`, clusterName, again, d.hostNames())
}

func (d *demo) hostNames() string {
	var names []string
	for _, h := range d.hosts {
		names = append(names, h.name)
	}
	return strings.Join(names, ", ")
}

// shutdown stops the agents (removing real hosts and their site), the
// hub and the workload API server, in that order, and waits for each.
func (d *demo) shutdown() {
	if d.site != nil {
		d.step("removing the edge hosts and their site, then stopping the hub")
		d.closeReal()
	} else if len(d.hosts) > 0 || d.hub != nil || d.workload != nil {
		d.step("stopping the agents, the hub and the workload API server")
	}
	for _, h := range d.hosts {
		if h.p == nil {
			continue
		}
		if err := h.stop(context.Background()); err != nil {
			fmt.Fprintf(d.out, "stopping %s: %v\n", h.name, err)
		}
	}
	if err := d.stopHub(); err != nil {
		fmt.Fprintf(d.out, "stopping the hub: %v\n", err)
	}
	if d.workload != nil {
		if err := d.workload.Stop(); err != nil {
			fmt.Fprintf(d.out, "stopping the workload API server: %v\n", err)
		}
		d.workload = nil
	}
}

// forget removes the data dir's content, refusing while something runs
// on it.
func (d *demo) forget() error {
	if pids, err := localkube.Processes(d.dataDir); err != nil {
		return err
	} else if len(pids) > 0 {
		return fmt.Errorf("processes still run on %s (pids %v): stop the other demo or hub first", d.dataDir, pids)
	}
	if err := os.RemoveAll(d.dataDir); err != nil {
		return fmt.Errorf("removing %s: %w", d.dataDir, err)
	}
	return nil
}

func waitFor(ctx context.Context, timeout time.Duration, what string, progress func(string), cond func() (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		state, err := cond()
		if err == nil {
			return nil
		}
		if state != last && progress != nil {
			progress(state)
			last = state
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not done after %s: %v", what, timeout, err)
		case <-time.After(time.Second):
		}
	}
}
