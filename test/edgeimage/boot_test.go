package edgeimage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/internal/testkit"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// hub is `fleet-hub dev` (its own etcd and API server), with its gateway
// forwarded to a site's router.
type hub struct {
	kubeconfig, kubectlFleet, kubectl string
	url, pin                          string
}

// startHub starts fleet-hub dev, its gateway reached from the site
// through the router.
func startHub(t *testing.T, site *testhost.Site) *hub {
	t.Helper()
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../cmd/fleet-hub", "../../cmd/kubectl-fleet").CombinedOutput(); err != nil {
		t.Fatalf("building fleet-hub and kubectl-fleet: %v\n%s", err, out)
	}
	data := t.TempDir()
	gw := testkit.FreeAddr(t)
	k8s, _ := filepath.Abs(filepath.Join(repo, "bin/k8s"))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "fleet-hub"), "dev", "--data-dir", data, "--bin-dir", k8s,
		"--gateway-bind-address", gw, "--proxy-bind-address", "0", "--gateway-ips", site.Router)
	logf, err := os.Create(filepath.Join(data, "dev.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(data, "dev.log"))
			t.Logf("fleet-hub dev:\n%s", lastLines(b, 40))
		}
	})
	_, port, _ := net.SplitHostPort(gw)
	routed, err := site.Forward(site.Router+":"+port, gw)
	if err != nil {
		t.Fatal(err)
	}
	h := &hub{kubeconfig: filepath.Join(data, "kubeconfig"), kubectlFleet: filepath.Join(bin, "kubectl-fleet"),
		kubectl: filepath.Join(k8s, "kubectl"), url: "https://" + routed}
	// It prints the gateway's address and pin once the hub serves.
	testkit.Eventually(t, 3*time.Minute, time.Second, "fleet-hub dev serving", func() error {
		if b, _ := os.ReadFile(filepath.Join(data, "dev.log")); !bytes.Contains(b, []byte("CA pin sha256:")) {
			return errors.New("no gateway line in its output yet")
		}
		return nil
	})
	return h
}

func (h *hub) fleet(args ...string) (string, error) {
	cmd := exec.Command(h.kubectlFleet, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("kubectl fleet %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var (
	tokenRE = regexp.MustCompile(`(?m)^token: ([a-z0-9]{6}\.[a-z0-9]{16})$`)
	pinRE   = regexp.MustCompile(`--ca-cert-hash (sha256:[0-9a-f]{64})`)
)

// token makes an enrollment token for n machines, whose hosts get labels
// (k=v,…) if any, and learns the CA pin.
func (h *hub) token(t *testing.T, n int, labels ...string) string {
	t.Helper()
	args := []string{"token", "create", "--usages", strconv.Itoa(n)}
	if len(labels) > 0 {
		args = append(args, "--labels", strings.Join(labels, ","))
	}
	out, err := h.fleet(args...)
	if err != nil {
		t.Fatal(err)
	}
	tok, pin := tokenRE.FindStringSubmatch(out), pinRE.FindStringSubmatch(out)
	if tok == nil || pin == nil {
		t.Fatalf("kubectl fleet token create printed no token or pin:\n%s", out)
	}
	h.pin = pin[1]
	return tok[1]
}

type edgeHost struct {
	Metadata struct{ Name string }
	Status   struct {
		Facts struct {
			Hostname  string `json:"hostname"`
			MachineID string `json:"machineID"`
		}
	}
}

func (h *hub) hosts(t *testing.T) []edgeHost {
	t.Helper()
	cmd := exec.Command(h.kubectl, "get", "edgehosts", "-A", "-o", "json")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+h.kubeconfig)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl get edgehosts: %v", err)
	}
	var list struct{ Items []edgeHost }
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// checkBoot boots two boxes from one image under real systemd, behind a
// site's router, and checks what the image and the agent's unit promise.
func checkBoot(t *testing.T, rootfs string) {
	site, err := testhost.NewSite("fimg", "10.95.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = site.Close() })
	h := startHub(t, site)
	tok := h.token(t, 2)

	// The image as a user bakes it with fleet-agent install --hub
	// --ca-cert-hash: the hub and pin, no token (dropped in later), no
	// hostname. The watchdog is compressed from 60 s to keep the test short.
	files := map[string]string{
		"/etc/fleet-agent/config.yaml":                                    fmt.Sprintf("hub: %s\ncaCertHash: %s\ntokenFile: /etc/fleet-agent/token\n", h.url, h.pin),
		"/etc/systemd/system/fleet-agent.service.d/50-test-watchdog.conf": "[Service]\nWatchdogSec=10s\n",
	}
	ctx := context.Background()
	var boxes []*testhost.Host
	for _, name := range []string{"fimg-a", "fimg-b"} {
		started := time.Now()
		b, err := site.NewHost(ctx, testhost.HostOptions{Name: name, Image: rootfs, Dir: t.TempDir(), Files: files, Unnamed: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: boot to is-system-running=running in %s", name, time.Since(started).Round(100*time.Millisecond))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s fleet-agent journal:\n%s", b.Name, lastLines([]byte(b.Journal("fleet-agent.service")), 30))
			}
			_ = b.Close()
		})
		boxes = append(boxes, b)
	}

	// READY comes before the hub is reached: the unit is active while the
	// agent waits for its token.
	names := map[string]bool{}
	for _, b := range boxes {
		testkit.Eventually(t, time.Minute, time.Second, b.Name+" agent active and waiting for its token", func() error {
			p, err := b.Show(ctx, "fleet-agent.service", "ActiveState", "StatusText")
			if err != nil {
				return err
			}
			if p["ActiveState"] != "active" || !strings.Contains(p["StatusText"], "waiting for /etc/fleet-agent/token") {
				return fmt.Errorf("%v", p)
			}
			return nil
		})
		hn, err := b.Command(ctx, "hostname").Output()
		if err != nil {
			t.Fatal(err)
		}
		id, _ := os.ReadFile(b.Root("etc/machine-id"))
		name := strings.TrimSpace(string(hn))
		if want := "edge-" + string(id[:12]); name != want {
			t.Errorf("%s: hostname %q, want %q (fleet-agent firstboot, from the machine-id)", b.Name, name, want)
		}
		names[name] = true
	}
	if len(names) != 2 {
		t.Fatalf("two boxes from one image share a hostname: %v", names)
	}

	// The token dropped in after start enrolls each box as a host of its own.
	for _, b := range boxes {
		if err := b.WriteFile("/etc/fleet-agent/token", tok+"\n", 0o600); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 2*time.Minute, 2*time.Second, "both boxes enrolled", func() error {
		hosts := h.hosts(t)
		ids := map[string]bool{}
		for _, e := range hosts {
			if names[e.Metadata.Name] && e.Status.Facts.MachineID != "" {
				ids[e.Status.Facts.MachineID] = true
			}
		}
		if len(hosts) != 2 || len(ids) != 2 {
			return fmt.Errorf("EdgeHosts %+v", hosts)
		}
		return nil
	})

	// The watchdog restarts a hung agent, which comes back connected.
	a := boxes[0]
	p, err := a.Show(ctx, "fleet-agent.service", "MainPID", "NRestarts")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := a.Command(ctx, "kill", "-STOP", p["MainPID"]).CombinedOutput(); err != nil {
		t.Fatalf("stopping the agent: %v %s", err, out)
	}
	testkit.Eventually(t, 2*time.Minute, 2*time.Second, "the watchdog restarted the hung agent", func() error {
		q, err := a.Show(ctx, "fleet-agent.service", "MainPID", "NRestarts", "StatusText")
		if err != nil {
			return err
		}
		if q["NRestarts"] == p["NRestarts"] || q["MainPID"] == p["MainPID"] || !strings.HasPrefix(q["StatusText"], "connected") {
			return fmt.Errorf("%v", q)
		}
		return nil
	})
	if j := a.Journal("fleet-agent.service"); !strings.Contains(j, "Watchdog timeout") {
		t.Errorf("no watchdog timeout in the journal:\n%s", lastLines([]byte(j), 20))
	}

	// A crash loop is paced by RestartSec=5s and never given up on
	// (StartLimitIntervalSec=0): a box has no one to press the button.
	b := boxes[1]
	good, err := os.ReadFile(b.Root("etc/fleet-agent/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := b.Show(ctx, "fleet-agent.service", "NRestarts")
	if err := b.WriteFile("/etc/fleet-agent/config.yaml", "hub: http://not-https\n", 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := b.Command(ctx, "systemctl", "kill", "fleet-agent.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl kill: %v %s", err, out)
	}
	start := time.Now()
	time.Sleep(22 * time.Second)
	after, _ := b.Show(ctx, "fleet-agent.service", "NRestarts", "ActiveState")
	n0, _ := strconv.Atoi(before["NRestarts"])
	n1, _ := strconv.Atoi(after["NRestarts"])
	if maxN := int(time.Since(start)/(5*time.Second)) + 1; n1-n0 < 2 || n1-n0 > maxN {
		t.Errorf("%d restarts in %s of a crash loop, want between 2 and %d (RestartSec=5s)", n1-n0, time.Since(start).Round(time.Second), maxN)
	}
	if after["ActiveState"] == "failed" {
		t.Error("systemd gave up on the crash-looping agent")
	}
	if j := b.Journal("fleet-agent.service"); !strings.Contains(j, "must be an https:// URL") {
		t.Errorf("the journal does not say why the agent exits:\n%s", lastLines([]byte(j), 10))
	}
	if err := b.WriteFile("/etc/fleet-agent/config.yaml", string(good), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, time.Second, "the agent back after the config was fixed", func() error {
		q, err := b.Show(ctx, "fleet-agent.service", "StatusText")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(q["StatusText"], "connected") {
			return fmt.Errorf("%v", q)
		}
		return nil
	})
	if n := len(h.hosts(t)); n != 2 {
		t.Errorf("%d EdgeHosts after the restarts, want 2 (no new enrollment)", n)
	}
}
