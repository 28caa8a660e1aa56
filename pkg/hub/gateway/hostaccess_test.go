package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/agent"
	"github.com/edgefleet/fleet/pkg/agent/logring"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	hubaccess "github.com/edgefleet/fleet/pkg/hub/hostaccess"
)

const joinToken = "abcdef.0123456789abcdef"

// An operator reads a host's bootstrap output (its join token redacted on
// the host), follows its agent's log and reads its facts through the
// Kubernetes API server's aggregation layer; a user without the RBAC
// verb is refused, by the API server and by the hub's own check; every
// access leaves an Event on the EdgeHost.
func TestHostLogsAndFactsThroughTheAggregationLayer(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	unregisterHostAccess(t)
	h := startHub(t, hubOptions{ns: ns, hostAccess: registered()})
	e := newEdge(t, "logs-1", h.url, h.srv.CA().Pin(), newToken(t, ns, enrolltoken.Options{}))
	e.ring = logring.New(0)
	fmt.Fprintf(e.ring, "agent started\nheard of a token %s in passing\n", joinToken)
	must(t, os.MkdirAll(e.cfg.StateDir, 0o700))
	must(t, os.WriteFile(filepath.Join(e.cfg.StateDir, agent.BootstrapTranscript), []byte(
		"==> runcmd 1/1: kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml\n"+
			"[preflight] Running pre-flight checks\n"+
			"kubeadm join edge.fleet.internal:6443 --token "+joinToken+" --discovery-token-ca-cert-hash sha256:0a1b\n"+
			"error execution phase preflight: couldn't validate the identity of the API Server\n"+
			"==> runcmd 1/1 failed: exit status 1\n"), 0o600))
	e.start()
	eventually(t, "agent connected", func() error {
		st, err := connectedStatus(ns, "logs-1")
		if err != nil || st != metav1.ConditionTrue {
			return fmt.Errorf("AgentConnected %q: %v", st, err)
		}
		return nil
	})

	alice, bob := userConnection(t, "alice"), userConnection(t, "bob")
	must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: objMeta(ns, "host-access"), Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{hostaccess.Group}, Resources: []string{"edgehosts/log", "edgehosts/facts"}, Verbs: []string{"get"}}}}))
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: objMeta(ns, "alice-host-access"),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "host-access"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}))

	// 1. The bootstrap's output, its join token redacted on the host.
	var out string
	eventually(t, "the bootstrap log through the aggregation layer", func() error {
		b, err := alice.Get().AbsPath(hostaccess.Path(ns, "logs-1", "log")).Param("source", "bootstrap").DoRaw(ctx)
		out = string(b)
		return err
	})
	if strings.Contains(out, joinToken) || !strings.Contains(out, "--token [REDACTED]") ||
		!strings.Contains(out, "couldn't validate the identity of the API Server") || !strings.Contains(out, "sha256:0a1b") {
		t.Fatalf("bootstrap log not as written with the token redacted:\n%s", out)
	}

	// 2. The facts, from the agent now.
	b, err := alice.Get().AbsPath(hostaccess.Path(ns, "logs-1", "facts")).DoRaw(ctx)
	must(t, err)
	facts := &hostaccess.EdgeHostFacts{}
	must(t, json.Unmarshal(b, facts))
	if facts.Report.Facts.Hostname != "logs-1" || facts.Report.Facts.OS != "Test Linux 1" || len(facts.Report.Interfaces) == 0 ||
		facts.Report.Kernel == "" || facts.Report.AgentStarted == nil {
		t.Errorf("facts: %+v", facts.Report)
	}

	// 3. Following the agent's log: what it held, then a line written after.
	fctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	stream, err := alice.Get().AbsPath(hostaccess.Path(ns, "logs-1", "log")).Param("follow", "true").Stream(fctx)
	must(t, err)
	lines := bufio.NewScanner(stream)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("the followed log ended: %v", lines.Err())
		}
		return lines.Text()
	}
	if l := next(); l != "agent started" {
		t.Errorf("first line %q", l)
	}
	if l := next(); strings.Contains(l, joinToken) {
		t.Errorf("the agent's log carried a token out: %q", l)
	}
	fmt.Fprintln(e.ring, "a line written while followed")
	if l := next(); l != "a line written while followed" {
		t.Errorf("followed line %q", l)
	}
	_ = stream.Close()
	cancel()

	// 4. Without the verb: the API server refuses.
	_, err = bob.Get().AbsPath(hostaccess.Path(ns, "logs-1", "log")).DoRaw(ctx)
	if !apierrors.IsForbidden(err) {
		t.Errorf("bob read the log: %v", err)
	}
	// ... and so does the hub, asked directly as the aggregation layer
	// would for bob; without the aggregation layer's certificate, it
	// does not even ask.
	fp, err := env.FrontProxyCertificate()
	must(t, err)
	for _, c := range []struct {
		cert []tls.Certificate
		want int
	}{{[]tls.Certificate{fp}, http.StatusForbidden}, {nil, http.StatusUnauthorized}} {
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, //nolint:gosec // the hub's serving certificate is not what this checks
			Certificates:       c.cert}}}
		req, _ := http.NewRequest(http.MethodGet, "https://"+h.access.Addr()+hostaccess.Path(ns, "logs-1", "log")+"?source=bootstrap", nil)
		req.Header.Set("X-Remote-User", "bob")
		resp, err := hc.Do(req)
		must(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || strings.Contains(string(body), "couldn't validate") {
			t.Errorf("asked directly as bob (client certificate: %v): %d %s", c.cert != nil, resp.StatusCode, body)
		}
	}

	// 5. Every access is an Event on the EdgeHost, naming who.
	eventually(t, "Events of the accesses", func() error {
		evs := &eventsv1.EventList{}
		if err := env.Client.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.Regarding.Name == "logs-1" && strings.Contains(ev.Note, "alice") {
				seen[ev.Reason+" "+ev.Note] = true
			}
		}
		for _, want := range []string{"HostLogRead alice read the bootstrap log", "HostFactsRead alice read the host's facts",
			"HostLogRead alice read the agent log, following it"} {
			if !seen[want] {
				return fmt.Errorf("no Event %q among %v", want, seen)
			}
		}
		return nil
	})
}

// registered is the host-access API of a replica registered with the
// aggregation layer. The APIService is cluster-wide: one test at a time
// has it, and deletes it after (a stale one would fail other tests'
// discovery).
func registered() *hubaccess.Options {
	return &hubaccess.Options{Addr: "127.0.0.1:0", Register: true, Service: "fleet-hub-host-access", ExternalName: "localhost"}
}

func unregisterHostAccess(t *testing.T) {
	t.Cleanup(func() {
		a := &unstructured.Unstructured{}
		a.SetAPIVersion("apiregistration.k8s.io/v1")
		a.SetKind("APIService")
		a.SetName(hostaccess.APIServiceName)
		_ = env.Client.Delete(context.Background(), a)
	})
}

// A request that lands on the replica without the host's session is
// forwarded to the one with it, once, and served there.
func TestHostLogsForwardedToTheReplicaWithTheSession(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	unregisterHostAccess(t)
	// Every replica listens on the same host-access port, at its own
	// address (here two loopback addresses).
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	a := registered()
	a.Addr, a.Forward = "127.0.0.1:"+port, true
	b := &hubaccess.Options{Addr: "127.0.0.2:" + port, Service: "fleet-hub-host-access", Forward: true}
	hubA := startHub(t, hubOptions{ns: ns, hostAccess: a, replica: "hub-a", replicaProxy: "127.0.0.1:1"})
	hubB := startHub(t, hubOptions{ns: ns, hostAccess: b, replica: "hub-b", replicaProxy: "127.0.0.2:1"})
	e := newEdge(t, "fwd-1", hubB.url, hubB.srv.CA().Pin(), newToken(t, ns, enrolltoken.Options{}))
	e.ring = logring.New(0)
	fmt.Fprintln(e.ring, "a line on the agent of replica b")
	e.start()
	eventually(t, "agent connected to replica b", func() error {
		host, err := getHost(ns, "fwd-1")
		if err != nil || host.Status.HubReplica != "hub-b" {
			return fmt.Errorf("host on %q: %v", host.Status.HubReplica, err)
		}
		return nil
	})
	if hubA.srv.Session(ns, "fwd-1") != nil {
		t.Fatal("replica a holds the session too")
	}
	admin := userConnection(t, "erin")
	must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: objMeta(ns, "erin-admin"),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "erin"}}}))
	var out string
	eventually(t, "the agent log through replica a", func() error {
		b, err := admin.Get().AbsPath(hostaccess.Path(ns, "fwd-1", "log")).DoRaw(ctx)
		out = string(b)
		return err
	})
	if !strings.Contains(out, "a line on the agent of replica b") {
		t.Errorf("log through replica a: %q", out)
	}
	// A forward with a forged signature is refused by the peer.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // not what this checks
	req, _ := http.NewRequest(http.MethodGet, "https://"+hubB.access.Addr()+hostaccess.Path(ns, "fwd-1", "log"), nil)
	req.Header.Set("Fleet-Host-Access-User", "mallory")
	req.Header.Set("Fleet-Host-Access-Signature", fmt.Sprintf("%d.forged", time.Now().Unix()+10))
	resp, err := hc.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged forward: %d", resp.StatusCode)
	}
}

// userConnection is a REST client of a user with no rights but RBAC's.
func userConnection(t *testing.T, name string) rest.Interface {
	t.Helper()
	cfg, err := env.UserConfig(name)
	must(t, err)
	conn, err := kube.NewConnection(cfg)
	must(t, err)
	return conn.REST
}
