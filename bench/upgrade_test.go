package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/internal/testkit/testhost"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/enrollment"
	"github.com/edgefleet/fleet/pkg/hub/inventory"
)

const (
	upgradeFrom = "v1.35.4"
	upgradeTo   = "v1.36.3"
	// Targets of issue #35 for a one-host site.
	upgradeTarget  = 300.0
	apiDownTarget  = 60.0
	readyzInterval = 100 * time.Millisecond
	// afterSettle: how long /readyz must answer after the upgrade for the
	// site to count as back.
	afterSettle = 30 * time.Second
)

var upgradeKubeadmConfig = flag.String("upgrade-kubeadm-config", "docs/templates/kubeadm-cgroupv1-test-hosts.yaml", "The --kubeadm-config BenchmarkInPlaceUpgrade makes its site with (relative to the module's root), e.g. to try API server flags.")

var upgradeLogs = flag.String("upgrade-logs", "", "Where BenchmarkInPlaceUpgrade copies the host's pod logs and its kubelet's, containerd's and agent's journals after the upgrade (default: nowhere).")

// BenchmarkInPlaceUpgrade times `kubectl fleet upgrade cluster --wait` on a
// one-host site (a control plane of one plain Machine, real kubeadm,
// kubelet and containerd) from v1.35.4 (staged) to v1.36.3 (the edge
// image's own), splits it into the agent's steps from its journal, and
// measures how long the site's API server is unavailable: GET /readyz
// through the hub's edge reach every 100 ms during the upgrade. It needs
// root, bin/edge-image (make test-image) and bin/k8s-v1.35.4.
//
//	go test ./bench -run '^$' -bench InPlaceUpgrade -benchtime 1x -timeout 30m
func BenchmarkInPlaceUpgrade(b *testing.B) {
	kit := realNodesKit(b)
	prev, err := filepath.Abs(filepath.Join("..", "bin", "k8s-"+upgradeFrom))
	must(b, err)
	if _, err := os.Stat(filepath.Join(prev, "kubeadm")); err != nil {
		b.Fatalf("BenchmarkInPlaceUpgrade's host needs %s (make k8s-prev): %v", upgradeFrom, err)
	}
	// The image runs upgradeTo; the cluster is made on upgradeFrom, staged.
	staged := map[string]string{upgradeFrom: prev}
	ctrl.SetLogger(logr.Discard())
	startClusterAPI(b)
	for range b.N {
		inPlaceUpgrade(b, kit, staged)
	}
}

func inPlaceUpgrade(b *testing.B, kit realNodesBinaries, staged map[string]string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	ns, err := env.CreateNamespace(ctx, "upgrade")
	must(b, err)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%s] in-place upgrade: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	const lan = "10.95.1"
	gw := startRealNodesHub(ctx, b, ns, lan+".1")
	site, err := testhost.NewSite(fmt.Sprintf("fub-%d", os.Getpid()%100000), lan)
	must(b, err)
	b.Cleanup(func() {
		if err := site.Close(); err != nil {
			b.Error(err)
		}
	})
	fwd, err := site.Forward(lan+".1:8443", gw.Addr())
	must(b, err)
	token, _, err := enrollment.CreateToken(ctx, c, ns, enrolltoken.Options{TTL: time.Hour, HostNamespace: ns}, time.Now())
	must(b, err)
	name := fmt.Sprintf("ub%d", os.Getpid()%100000)
	h, err := site.NewHost(ctx, testhost.HostOptions{Name: name, Image: kit.image, Agent: kit.agent, Dir: b.TempDir(), Staged: staged})
	must(b, err)
	b.Cleanup(func() {
		if b.Failed() {
			b.Log(h.Logs())
		}
		if err := h.Close(); err != nil {
			b.Error(err)
		}
	})
	must(b, h.WriteFile("etc/systemd/system/fleet-agent.service.d/20-bench-timestamps.conf", ("[Service]\nExecStart=\nExecStart=/usr/bin/fleet-agent --config /etc/fleet-agent/config.yaml --zap-time-encoding=rfc3339nano\n"), 0o644))
	if out, err := h.Command(ctx, "systemctl", "daemon-reload").CombinedOutput(); err != nil {
		b.Fatalf("systemctl daemon-reload on %s: %v: %s", h.Name, err, out)
	}
	must(b, h.StartAgent(ctx, testhost.AgentConfig{Hub: "https://" + fwd, Token: token, CACertHash: gw.CA().Pin(), ResyncInterval: "2s"}))

	hubKC := filepath.Join(b.TempDir(), "hub.kubeconfig")
	must(b, os.WriteFile(hubKC, kubeconfig.FromEnvTestConfig(env.Config, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "hub"}}), 0o600))
	fleet := func(args ...string) (string, time.Duration) {
		cmd := exec.CommandContext(ctx, kit.kubectlFleet, append(args, "--kubeconfig", hubKC, "-n", ns)...)
		cmd.Dir = ".."
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("kubectl fleet %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String(), time.Since(start)
	}
	_, created := fleet("create", "cluster", realNodesCluster, "--control-plane=machines", "--kubernetes-version", upgradeFrom,
		"--kubeadm-config", *upgradeKubeadmConfig, "--wait", "--timeout", "15m")
	logf("one-host site on %s Running after %s", upgradeFrom, created.Round(time.Second))
	waitUntil(b, "the host reporting "+upgradeFrom+" and "+upgradeTo+" staged", func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if host.Status.KubernetesVersion != upgradeFrom || len(host.Status.Facts.KubernetesVersions) == 0 {
			return fmt.Errorf("EdgeHost %s runs %q, staged %v", name, host.Status.KubernetesVersion, host.Status.Facts.KubernetesVersions)
		}
		return nil
	})
	var api readyz
	waitUntil(b, "/readyz answering through the hub", func() error {
		wc, err := workloadClient(ctx, ns)
		if err != nil {
			return err
		}
		api = readyz{wc.Discovery().RESTClient()}
		return api.check(ctx)
	})

	// Poll /readyz through the hub while the upgrade runs.
	var polls []poll
	var mu sync.Mutex
	pollCtx, stopPolling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(readyzInterval)
		defer t.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case at := <-t.C:
				p := poll{at: at, why: api.why(pollCtx)}
				p.ok = p.why == ""
				mu.Lock()
				polls = append(polls, p)
				mu.Unlock()
			}
		}
	})
	load0 := loadAverage()
	start := time.Now()
	out, took := fleet("upgrade", "cluster", realNodesCluster, "--kubernetes-version", upgradeTo, "--wait", "--timeout", "15m")
	returned := time.Now()
	logf("kubectl fleet upgrade cluster --wait returned after %s", took.Round(time.Millisecond))
	// The site may go down again after the command returns: poll until
	// /readyz has answered for afterSettle without a break.
	for deadline := returned.Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		mu.Lock()
		lastBad := returned
		for _, p := range polls {
			if !p.ok && p.at.After(lastBad) {
				lastBad = p.at
			}
		}
		mu.Unlock()
		if time.Since(lastBad) >= afterSettle {
			break
		}
	}
	stopPolling()
	wg.Wait()
	var after []poll
	for _, p := range polls {
		if !p.at.Before(returned) {
			after = append(after, p)
		}
	}
	_, downAfter, _ := downtime(after)

	if *upgradeLogs != "" {
		keepLogs(b, h, *upgradeLogs)
	}
	steps, err := upgradeSteps(h.UnitLog("fleet-agent.service"), start)
	must(b, err)
	longest, total, failed := downtime(polls)
	logf("API server unavailable through the hub: longest %s, %s in all (%d of %d polls failed)", longest, total, failed, len(polls))
	m := machineOf(ctx, b, ns, name)
	if m.Spec.Version != upgradeTo || m.Status.NodeInfo == nil || m.Status.NodeInfo.KubeletVersion != upgradeTo {
		b.Fatalf("Machine %s after the upgrade: version %s, node %+v", m.Name, m.Spec.Version, m.Status.NodeInfo)
	}

	rep := results.New("inplaceupgrade", "inplaceupgrade", "An in-place upgrade of a one-host site",
		"go test ./bench -run '^$' -bench InPlaceUpgrade -benchtime 1x -timeout 30m` (as root), which times `kubectl fleet upgrade cluster "+
			realNodesCluster+" --kubernetes-version "+upgradeTo+" --wait` on a site made by `kubectl fleet create cluster --control-plane=machines --kubernetes-version "+upgradeFrom)
	rep.Add(results.Figure{Key: "upgrade-wait-s", Name: "`kubectl fleet upgrade cluster --wait`, " + upgradeFrom + " → " + upgradeTo + " on one real host: returns when the Node runs the new version, healthy",
		Value: took.Seconds(), Unit: "s", Target: fmt.Sprintf("≤ %g s", upgradeTarget), Limit: results.Limit(upgradeTarget), Below: true})
	rep.Add(results.Figure{Key: "api-down-longest-s", Name: "the site's API server unavailable through the hub, longest stretch (GET /readyz every 100 ms)",
		Value: longest.Seconds(), Unit: "s", Target: fmt.Sprintf("≤ %g s", apiDownTarget), Limit: results.Limit(apiDownTarget), Below: true})
	rep.Add(results.Figure{Key: "api-down-total-s", Name: "… all stretches together", Value: total.Seconds(), Unit: "s"})
	rep.Add(results.Figure{Key: "api-down-after-s", Name: fmt.Sprintf("… of which after the command returned (polled until %s without a break)", afterSettle),
		Value: downAfter.Seconds(), Unit: "s"})
	for i, s := range steps {
		rep.Add(results.Figure{Key: fmt.Sprintf("step-%d-s", i+1), Name: "agent step: " + s.name, Value: s.took.Seconds(), Unit: "s"})
	}
	b.ReportMetric(took.Seconds(), "s-upgrade")
	b.ReportMetric(longest.Seconds(), "s-api-down")
	rep.Tables = append(rep.Tables, pollCauses(polls, start))
	rep.Tables = append(rep.Tables, containerTimeline(h, start))
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("Load average (1 min) of the machine when the upgrade started: %s; when it ended: %s.", load0, loadAverage()),
		fmt.Sprintf("The upgrade ran on this machine's 2 cores beside the hub's API server and etcd and Cluster API's and fleet's reconcilers; the "+
			"host's control plane (etcd, API server, controller manager, scheduler) restarts one component at a time under `kubeadm upgrade apply`. "+
			"%d /readyz polls, %d failed; a poll times out after 1 s. The steps are the agent's journal lines (`Upgrade step`), to the next step "+
			"or to `Upgraded Kubernetes in place`.", len(polls), failed),
		"`kubectl fleet upgrade cluster --wait` output:\n\n```\n"+tailString(out, 4000)+"\n```")
	if _, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}
	must(b, c.Delete(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: realNodesCluster}}))
	waitUntil(b, "the cluster deleted and the host Available", func() error {
		host := &infrav1.EdgeHost{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
			return err
		}
		if host.Status.Phase != infrav1.HostAvailable {
			return fmt.Errorf("host %s is %q", name, host.Status.Phase)
		}
		return nil
	})
}

// readyz asks the API server whether it is ready, within a second.
type readyz struct{ rc rest.Interface }

func (r readyz) check(ctx context.Context) error {
	return r.rc.Get().AbsPath("/readyz").Timeout(time.Second).Do(ctx).Error()
}

// why asks /readyz?verbose and says what is not ready: the checks the API
// server lists as failed, or how the request failed ("" when ready).
func (r readyz) why(ctx context.Context) string {
	body, err := r.rc.Get().AbsPath("/readyz").Param("verbose", "").Timeout(time.Second).DoRaw(ctx)
	if err == nil {
		return ""
	}
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if name, ok := strings.CutPrefix(line, "[-]"); ok && len(strings.Fields(name)) > 0 {
			failed = append(failed, strings.Fields(name)[0])
		}
	}
	if len(failed) > 0 {
		return "API server up, not ready: " + strings.Join(failed, ", ")
	}
	msg := err.Error()
	for _, cause := range []string{"connection refused", "connection reset", "EOF", "deadline exceeded", "Timeout", "timeout"} {
		if strings.Contains(msg, cause) {
			return "no answer: " + cause
		}
	}
	return "no answer: " + tailString(msg, 120)
}

type poll struct {
	at time.Time
	ok bool
	// why the poll failed (readyz.why).
	why string
}

// pollCauses groups failed polls by why, with when each cause was first
// and last seen, in seconds after start.
func pollCauses(polls []poll, start time.Time) results.Table {
	t := results.Table{Title: "Why /readyz failed during the upgrade (each failed poll's /readyz?verbose)",
		Header: []string{"cause", "failed polls", "first (s after the command)", "last"}}
	type span struct {
		n           int
		first, last time.Time
	}
	var order []string
	by := map[string]*span{}
	for _, p := range polls {
		if p.ok {
			continue
		}
		s := by[p.why]
		if s == nil {
			s = &span{first: p.at}
			by[p.why] = s
			order = append(order, p.why)
		}
		s.n++
		s.last = p.at
	}
	for _, why := range order {
		s := by[why]
		t.Rows = append(t.Rows, []string{why, fmt.Sprint(s.n), fmt.Sprintf("%.1f", s.first.Sub(start).Seconds()), fmt.Sprintf("%.1f", s.last.Sub(start).Seconds())})
	}
	return t
}

// containerTimeline is when containerd created, started and stopped each
// control-plane container on the host during the upgrade (its journal), in
// seconds after start: which restarts the API server's unavailability is
// made of.
func containerTimeline(h *testhost.Host, start time.Time) results.Table {
	t := results.Table{Title: "The host's control-plane containers during the upgrade (containerd's journal; seconds after the command)",
		Header: []string{"container", "created", "started", "stop asked", "stopped"}}
	type container struct {
		name                            string
		created, started, stop, stopped time.Time
	}
	byID := map[string]*container{}
	var order []*container
	for _, line := range strings.Split(h.UnitLog("containerd.service"), "\n") {
		m := containerdLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil || at.Before(start) {
			continue
		}
		msg := m[2]
		if c := createdContainer.FindStringSubmatch(msg); c != nil {
			byID[c[2]] = &container{name: c[1], created: at}
			order = append(order, byID[c[2]])
			continue
		}
		id := containerID.FindStringSubmatch(msg)
		if id == nil {
			continue
		}
		c := byID[id[1]]
		if c == nil {
			// A container from before the upgrade (its name is not in
			// the journal read): named by its id.
			c = &container{name: "(running before) " + id[1][:12]}
			byID[id[1]] = c
			order = append(order, c)
		}
		switch {
		case strings.HasPrefix(msg, `StartContainer for`) && strings.HasSuffix(msg, "returns successfully"):
			c.started = at
		case strings.HasPrefix(msg, `StopContainer for`) && strings.Contains(msg, "with timeout"):
			c.stop = at
		case strings.HasPrefix(msg, `StopContainer for`) && strings.HasSuffix(msg, "returns successfully"):
			c.stopped = at
		}
	}
	at := func(x time.Time) string {
		if x.IsZero() {
			return "—"
		}
		return fmt.Sprintf("%.1f", x.Sub(start).Seconds())
	}
	controlPlane := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}
	for _, c := range order {
		if c.created.IsZero() && c.stop.IsZero() || !c.created.IsZero() && !slices.Contains(controlPlane, c.name) {
			continue
		}
		t.Rows = append(t.Rows, []string{c.name, at(c.created), at(c.started), at(c.stop), at(c.stopped)})
	}
	return t
}

var (
	// containerd logs time="…" level=… msg="…".
	containerdLine   = regexp.MustCompile(`time="([^"]+)".*? msg="((?:[^"\\]|\\.)*)"`)
	createdContainer = regexp.MustCompile(`ContainerMetadata\{Name:([a-z-]+),.*returns container id \\"([0-9a-f]{64})\\"`)
	containerID      = regexp.MustCompile(`for \\"([0-9a-f]{64})\\"`)
)

// downtime is the longest run of failed polls and all of them together,
// each run counted from its first failed poll to the next good one.
func downtime(polls []poll) (longest, total time.Duration, failed int) {
	var since time.Time
	for _, p := range polls {
		switch {
		case !p.ok:
			failed++
			if since.IsZero() {
				since = p.at
			}
		case !since.IsZero():
			d := p.at.Sub(since)
			total += d
			longest = max(longest, d)
			since = time.Time{}
		}
	}
	if !since.IsZero() && len(polls) > 0 {
		d := polls[len(polls)-1].at.Sub(since)
		total += d
		longest = max(longest, d)
	}
	return longest, total, failed
}

type step struct {
	name string
	took time.Duration
}

// upgradeSteps reads the agent's `Upgrade step` lines after since, each
// timed to the next or to the end of the upgrade.
func upgradeSteps(journal string, since time.Time) ([]step, error) {
	var names []string
	var at []time.Time
	end := time.Time{}
	sc := bufio.NewScanner(strings.NewReader(journal))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l journalLine
		if !bytes.HasPrefix(sc.Bytes(), []byte("{")) || json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil || t.Before(since) {
			continue
		}
		switch l.Msg {
		case "Upgrade step":
			names, at = append(names, l.Step), append(at, t)
		case "Upgraded Kubernetes in place":
			end = t
		}
	}
	if len(names) == 0 || end.IsZero() {
		return nil, fmt.Errorf("the agent's journal has no complete upgrade after %s", since.Format(time.RFC3339Nano))
	}
	steps := make([]step, len(names))
	for i := range names {
		next := end
		if i+1 < len(at) {
			next = at[i+1]
		}
		steps[i] = step{name: names[i], took: next.Sub(at[i])}
	}
	return steps, nil
}

func machineOf(ctx context.Context, b *testing.B, ns, host string) *clusterv1.Machine {
	b.Helper()
	list := &clusterv1.MachineList{}
	must(b, env.Client.List(ctx, list, client.InNamespace(ns)))
	for i := range list.Items {
		if list.Items[i].Spec.ProviderID == inventory.ProviderIDOf(ns, host) {
			return &list.Items[i]
		}
	}
	b.Fatalf("no Machine on host %s", host)
	return nil
}

// keepLogs copies the host's pod logs and the kubelet's and containerd's
// journals into dir, to read why a component was slow.
func keepLogs(b *testing.B, h *testhost.Host, dir string) {
	must(b, os.MkdirAll(dir, 0o755))
	if out, err := exec.Command("cp", "-a", h.Root("var/log/pods"), dir).CombinedOutput(); err != nil {
		b.Logf("copying the host's pod logs: %v: %s", err, out)
	}
	for _, unit := range []string{"kubelet.service", "containerd.service", "fleet-agent.service"} {
		must(b, os.WriteFile(filepath.Join(dir, unit+".log"), []byte(h.UnitLog(unit)), 0o644))
	}
}
