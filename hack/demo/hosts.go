package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/contract/hubinfo"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// siteLabel is on every demo host; roleLabel says what a host is for.
const (
	siteLabel = "site=demo"
	roleLabel = "role"
)

// host is one edge machine: a real host (th, with --nodes=real) or a
// sandbox root (its "/") with the node simulator; and its agent.
type host struct {
	name, role  string
	root        string
	config      string
	logPath     string
	agentBinary string
	p           *proc
	th          *testhost.Host
}

func (h *host) stateDir() string  { return filepath.Join(h.root, "var/lib/fleet-agent") }
func (h *host) tokenFile() string { return filepath.Join(h.root, "etc/fleet-agent/token") }

func (h *host) enrolled() bool {
	_, err := os.Stat(filepath.Join(h.stateDir(), "identity.json"))
	return err == nil
}

// start starts the agent: on a real host its unit, as systemctl would.
func (h *host) start(ctx context.Context) error {
	if h.th != nil {
		return h.th.Unit(ctx, "start", agentUnit)
	}
	if h.p != nil {
		select {
		case <-h.p.done:
		default:
			return fmt.Errorf("the agent of %s is running", h.name)
		}
	}
	log, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	p, err := startProc(h.agentBinary, []string{"--config", h.config}, log)
	log.Close() // the child has its own descriptor
	if err != nil {
		return err
	}
	h.p = p
	return nil
}

func (h *host) stop(ctx context.Context) error {
	if h.th != nil {
		return h.th.Unit(ctx, "stop", agentUnit)
	}
	if h.p == nil {
		return nil
	}
	return h.p.stop(30 * time.Second)
}

var tokenRE = regexp.MustCompile(`(?m)^token: (\S+)$`)

// startHosts makes the hosts (real ones, or sandboxes for the node
// simulator), enrolls the new ones with tokens from `kubectl fleet token
// create`, starts the agents and waits until all are connected.
func (d *demo) startHosts(ctx context.Context) error {
	logs := filepath.Join(d.dataDir, "demo", "logs")
	d.hosts = nil
	for i := 1; i <= d.agents; i++ {
		h := &host{name: fmt.Sprintf("edge-%d", i), role: "worker", agentBinary: filepath.Join(d.binDir, "fleet-agent")}
		if i == 1 {
			h.role = "control-plane"
		}
		h.root = filepath.Join(d.dataDir, "demo", "hosts", h.name)
		h.config = filepath.Join(h.root, "etc/fleet-agent/config.yaml")
		h.logPath = filepath.Join(logs, h.name+".log")
		d.hosts = append(d.hosts, h)
	}
	if d.real() {
		if err := d.makeRealHosts(ctx); err != nil {
			return err
		}
	} else if err := d.prepareSandboxes(logs); err != nil {
		return err
	}

	// The hub publishes its URL and CA pin; every run rewrites the agents'
	// configs from it (the pin is stable: the hub CA is kept in its data).
	info := &corev1.ConfigMap{}
	if err := d.client.Get(ctx, client.ObjectKey{Namespace: "fleet-system", Name: hubinfo.ConfigMap}, info); err != nil {
		return fmt.Errorf("reading the hub's published URL and CA pin: %w", err)
	}
	hubURL, pin := info.Data[hubinfo.KeyURL], info.Data[hubinfo.KeyCAPin]
	var fresh []*host
	for _, h := range d.hosts {
		if h.th == nil {
			if err := d.writeAgentConfig(h, hubURL, pin); err != nil {
				return err
			}
		}
		if h.th != nil || !h.enrolled() {
			fresh = append(fresh, h)
		}
	}
	tokens, err := d.createTokens(ctx, fresh)
	if err != nil {
		return err
	}

	if err := d.startAgents(ctx, fresh, tokens, hubURL, pin); err != nil {
		return err
	}
	err = waitFor(ctx, 3*time.Minute, "edge hosts connected", func(s string) { fmt.Fprintf(d.out, "    %s\n", s) }, func() (string, error) {
		n, err := d.connectedHosts(ctx)
		if err != nil {
			return "", err
		}
		if n < len(d.hosts) {
			return fmt.Sprintf("%d/%d edge hosts enrolled and connected", n, len(d.hosts)), errors.New("not all connected")
		}
		return "", nil
	})
	if err != nil {
		return fmt.Errorf("%w (agent logs: %s)", err, d.agentLogs())
	}
	return d.kubectlFleet(ctx, "get", "hosts")
}

// startAgents starts every host's agent, the fresh ones with a token.
func (d *demo) startAgents(ctx context.Context, fresh []*host, tokens map[string]string, hubURL, pin string) error {
	if d.real() {
		d.step("starting fleet-agent.service on %d hosts (its config written as an image's first boot would: hub URL, CA pin, token)", len(d.hosts))
		for _, h := range d.hosts {
			if err := h.th.StartAgent(ctx, testhost.AgentConfig{Hub: hubURL, Token: tokens[h.role], CACertHash: pin}); err != nil {
				return err
			}
		}
		return nil
	}
	// Dropped in as an image's first boot would; the agent deletes
	// nothing, the token is simply spent.
	for _, h := range fresh {
		if err := os.WriteFile(h.tokenFile(), []byte(tokens[h.role]+"\n"), 0o600); err != nil {
			return err
		}
	}
	d.step("starting %d fleet-agent processes (sandboxes in %s)", len(d.hosts), filepath.Join(d.dataDir, "demo", "hosts"))
	for _, h := range d.hosts {
		if err := h.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// prepareSandboxes makes each host's sandbox root for the node simulator.
func (d *demo) prepareSandboxes(logs string) error {
	simKubeconfig, err := os.ReadFile(d.workload.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return err
	}
	for _, h := range d.hosts {
		if err := d.prepareRoot(h, simKubeconfig); err != nil {
			return fmt.Errorf("preparing %s: %w", h.name, err)
		}
	}
	return nil
}

// agentLogs says where the agents log.
func (d *demo) agentLogs() string {
	if d.real() {
		var cmds []string
		for _, h := range d.hosts {
			if h.th != nil {
				cmds = append(cmds, fmt.Sprintf("nsenter -t %d -a journalctl -u %s", h.th.PID(), agentUnit))
			}
		}
		return "each host's journal: " + strings.Join(cmds, "; ")
	}
	return filepath.Join(d.dataDir, "demo", "logs")
}

// createTokens creates enrollment tokens for hosts not enrolled yet, one
// per role, and returns them by role.
func (d *demo) createTokens(ctx context.Context, fresh []*host) (map[string]string, error) {
	tokens := map[string]string{}
	if len(fresh) == 0 {
		return tokens, nil
	}
	d.step("creating enrollment tokens for %d new edge host(s)", len(fresh))
	byRole := map[string][]*host{}
	for _, h := range fresh {
		byRole[h.role] = append(byRole[h.role], h)
	}
	for _, role := range []string{"control-plane", "worker"} {
		hs := byRole[role]
		if len(hs) == 0 {
			continue
		}
		out, err := d.kubectlFleetOutput(ctx, true, "token", "create", "--usages", fmt.Sprint(len(hs)), "--ttl", "1h",
			"--labels", siteLabel+","+roleLabel+"="+role, "--description", "fleet demo "+role+" hosts")
		if err != nil {
			return nil, err
		}
		tok := tokenRE.FindStringSubmatch(out)
		if tok == nil {
			return nil, fmt.Errorf("could not read the token from kubectl fleet token create:\n%s", out)
		}
		tokens[role] = tok[1]
	}
	return tokens, nil
}

func (d *demo) connectedHosts(ctx context.Context) (int, error) {
	hosts := &infrav1.EdgeHostList{}
	sel, _ := labelsSelector(siteLabel)
	if err := d.client.List(ctx, hosts, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hosts.Items {
		if apimeta.IsStatusConditionTrue(h.Status.Conditions, infrav1.AgentConnectedCondition) {
			n++
		}
	}
	return n, nil
}

// prepareRoot makes the sandbox a minimal machine: identity files, the
// node simulator installed as kubeadm, and the workload kubeconfig it
// registers Nodes with (rewritten each run: the API server's certificates
// are new each time).
func (d *demo) prepareRoot(h *host, simKubeconfig []byte) error {
	files := map[string]string{
		"etc/hostname":             h.name + "\n",
		"etc/os-release":           "PRETTY_NAME=\"fleet demo sandbox\"\nID=fleet-demo\n",
		"etc/passwd":               "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                "root:x:0:\n",
		"etc/fleet-sim/kubeconfig": string(simKubeconfig),
	}
	if _, err := os.Stat(filepath.Join(h.root, "etc/machine-id")); err != nil {
		files["etc/machine-id"] = fmt.Sprintf("%032x", h.name)[:32] + "\n"
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(h.root, filepath.Dir(p)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(h.root, p), []byte(c), 0o644); err != nil {
			return err
		}
	}
	sim, err := os.ReadFile(filepath.Join(d.binDir, "fleet-nodesim"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(h.root, "opt/fleet/bin"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.root, "opt/fleet/bin/kubeadm"), sim, 0o755)
}

// writeAgentConfig writes the agent's config file, as an image would
// carry it.
func (d *demo) writeAgentConfig(h *host, hubURL, pin string) error {
	cfg := agent.Config{
		Hub: hubURL, CACertHash: pin, TokenFile: h.tokenFile(),
		StateDir: h.stateDir(), RootDir: h.root, Sandbox: true,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(h.config), 0o755); err != nil {
		return err
	}
	return os.WriteFile(h.config, b, 0o600)
}
