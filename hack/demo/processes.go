package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/hub/embedded/clusterapi"
	"github.com/edgefleet/fleet/pkg/hub/embedded/localkube"
)

const clusterName = "demo"

type demo struct {
	dataDir, binDir             string
	agents                      int
	gateway, proxy              string
	kubernetesVersion           string
	kubeadmConfig               string
	nodes                       string
	reset, noInstall, setUpOnly bool
	out                         io.Writer
	// probe lists what the machine lacks for real edge hosts
	// (testhost.Missing; a test's stand-in).
	probe func() []string

	hub       *proc
	hubExited <-chan struct{}
	workload  *localkube.Server
	site      *testhost.Site
	hosts     []*host
	client    client.Client
}

// proc is a child process whose end is observable.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// startProc starts a child in its own process group (so a Ctrl-C reaches
// the demo first, which then stops the children in order), asking the
// kernel to stop it if the demo dies.
func startProc(name string, args []string, out io.Writer) (*proc, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(name), err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM and waits, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM and was killed", filepath.Base(p.cmd.Path), grace)
	}
}

func (d *demo) kubeconfig() string { return filepath.Join(d.dataDir, "kubeconfig") }

// startHub runs `fleet-hub dev` and waits until it says it is ready,
// showing its progress lines.
func (d *demo) startHub(ctx context.Context) error {
	args := []string{"dev", "--data-dir", d.dataDir, "--bin-dir", filepath.Join(d.binDir, "k8s"), "--gateway-bind-address", d.gateway}
	if d.real() {
		// The hosts dial the gateway through their site's router, which
		// the gateway's certificate names; Cluster API reaches their
		// cluster through the edge-reach proxy.
		args = append(args, "--gateway-advertise-url", routerURL(), "--proxy-bind-address", d.proxy)
	} else {
		// The simulated cluster's API server is a local stand-in, reached
		// directly.
		args = append(args, "--proxy-bind-address", "0")
	}
	d.step("starting the embedded hub: fleet-hub %s", strings.Join(args, " "))
	pr, pw := io.Pipe()
	p, err := startProc(filepath.Join(d.binDir, "fleet-hub"), args, pw)
	if err != nil {
		return err
	}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			fmt.Fprintf(d.out, "    hub | %s\n", s.Text())
			if strings.Contains(s.Text(), " is ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { <-p.done; pw.Close() }()
	d.hub, d.hubExited = p, p.done
	select {
	case <-ready:
	case <-p.done:
		return fmt.Errorf("fleet-hub dev exited: %v (its log: %s)", p.err, filepath.Join(d.dataDir, "hub.log"))
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("fleet-hub dev not ready after 5 minutes (its log: %s)", filepath.Join(d.dataDir, "hub.log"))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig())
	if err != nil {
		return fmt.Errorf("reading the hub's kubeconfig: %w", err)
	}
	d.client, err = client.New(cfg, client.Options{Scheme: clusterapi.NewScheme()})
	return err
}

func (d *demo) stopHub() error {
	if d.hub == nil {
		return nil
	}
	err := d.hub.stop(time.Minute)
	d.hub, d.hubExited = nil, nil
	return err
}

// startWorkload runs the API server that plays the edge cluster's own.
func (d *demo) startWorkload() error {
	d.step("starting the edge cluster's API server (at a real site kubeadm starts it on the control-plane host)")
	s, err := localkube.Start(localkube.Options{
		Dir: filepath.Join(d.dataDir, "demo", "workload"), BinDir: filepath.Join(d.binDir, "k8s"), ContextName: "demo-workload",
	})
	if err != nil {
		return err
	}
	d.workload = s
	return nil
}

// kubectlFleet runs the real plugin binary, as an operator would, showing
// the command and its output.
func (d *demo) kubectlFleet(ctx context.Context, args ...string) error {
	_, err := d.kubectlFleetOutput(ctx, true, args...)
	return err
}

func (d *demo) kubectlFleetOutput(ctx context.Context, show bool, args ...string) (string, error) {
	fmt.Fprintf(d.out, "$ kubectl fleet %s\n", strings.Join(args, " "))
	var buf strings.Builder
	w := io.Writer(&buf)
	if show {
		w = io.MultiWriter(&buf, d.out)
	}
	if err := d.runFleet(ctx, w, w, args...); err != nil {
		if !show {
			fmt.Fprint(d.out, buf.String())
		}
		return buf.String(), err
	}
	return buf.String(), nil
}

// runFleet runs kubectl fleet with its output to stdout and stderr.
func (d *demo) runFleet(ctx context.Context, stdout, stderr io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(d.binDir, "kubectl-fleet"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.kubeconfig())
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl fleet %s: %w", args[0], err)
	}
	return nil
}
