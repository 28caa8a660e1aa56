package delivery

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/fleetscheme"
	"github.com/edgefleet/fleet/pkg/release"
)

// fixture is a hub with one release whose binary an HTTP server holds.
type fixture struct {
	server  *Server
	order   *wire.AgentReleaseOrder
	binary  []byte
	fetches atomic.Int32
}

func newFixture(t *testing.T, served []byte) *fixture {
	t.Helper()
	f := &fixture{binary: bytes.Repeat([]byte("fleet-agent "), 20000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.fetches.Add(1)
		_, _ = w.Write(served)
	}))
	t.Cleanup(srv.Close)
	if served == nil {
		served = f.binary
	}
	_, root, _ := release.GenerateKey()
	pub, key, _ := release.GenerateKey()
	cert, _ := release.Certify(root, pub, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "")
	sum := sha256.Sum256(f.binary)
	b, err := release.Sign(key, cert, release.Artifact{Name: release.AgentName, Version: "v0.9.2", OS: "linux", Arch: runtime.GOARCH,
		SHA256: hex.EncodeToString(sum[:]), Size: int64(len(f.binary)), Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(b)
	rel := &infrav1.EdgeAgentRelease{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"},
		Spec: infrav1.EdgeAgentReleaseSpec{Version: "v0.9.2", Artifacts: []infrav1.AgentArtifact{{Arch: runtime.GOARCH, URL: srv.URL, Bundle: string(raw)}}}}
	ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.2"}}
	c := fake.NewClientBuilder().WithScheme(fleetscheme.New()).WithObjects(rel, ro).Build()
	orders := &Orders{Client: c}
	f.server = NewServer(orders, logr.Discard(), Options{CacheDir: t.TempDir()})
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns", Annotations: map[string]string{
		infrav1.AgentReleaseAnnotation: `{"version":"v0.9.2","rollout":"x","wave":0,"since":"2026-12-06T00:00:00Z"}`}}}
	h.Status.Facts.Arch = runtime.GOARCH
	f.order = orders.For(t.Context(), h)
	if f.order == nil || f.order.SHA256 != hex.EncodeToString(sum[:]) || f.order.Size != int64(len(f.binary)) {
		t.Fatalf("order %+v", f.order)
	}
	return f
}

// session is an agent's end: what the hub sends on the streams it opens.
func (f *fixture) session(t *testing.T, done chan struct{}) (Session, <-chan []byte) {
	got := make(chan []byte, 4)
	return Session{Host: "ns/h", Namespace: "ns", Protocol: 2, Done: done, Open: func() (net.Conn, func(), error) {
		hub, agent := net.Pipe()
		go func() {
			frame, err := wire.ReadFrame(agent, wire.MaxTunnelFrameSize)
			if err != nil {
				got <- nil
				return
			}
			if _, err := wire.Decode(frame); err != nil {
				got <- nil
				return
			}
			b, _ := io.ReadAll(agent)
			got <- b
		}()
		return hub, func() {}, nil
	}}, got
}

// The hub serves the ordered binary from the offset asked, fetched once
// into its cache; it refuses another binary and an offset past the end.
func TestServeTheOrderedBinaryFromAnOffset(t *testing.T) {
	f := newFixture(t, nil)
	done := make(chan struct{})
	defer close(done)
	ss, got := f.session(t, done)
	if err := f.server.Serve(ss, &wire.ReleaseRequest{SHA256: f.order.SHA256, Offset: 1000}, f.order); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, f.binary[1000:]) {
		t.Fatalf("sent %d bytes, want the %d after offset 1000", len(b), len(f.binary)-1000)
	}
	if err := f.server.Serve(ss, &wire.ReleaseRequest{SHA256: f.order.SHA256}, f.order); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, f.binary) {
		t.Fatalf("sent %d bytes, want all %d", len(b), len(f.binary))
	}
	if n := f.fetches.Load(); n != 1 {
		t.Errorf("the hub fetched the binary %d times, want once", n)
	}
	other := strings.Repeat("0", 64)
	if err := f.server.Serve(ss, &wire.ReleaseRequest{SHA256: other}, f.order); err != ErrNotOrdered {
		t.Errorf("a binary not ordered: %v", err)
	}
	if err := f.server.Serve(ss, &wire.ReleaseRequest{SHA256: f.order.SHA256, Offset: f.order.Size + 1}, f.order); err == nil {
		t.Error("an offset past the end was served")
	}
}

// A url that serves something else than the bundle signs is never passed
// on: the stream is not even opened.
func TestServeRefusesABinaryThatIsNotTheBundles(t *testing.T) {
	f := newFixture(t, []byte("something else"))
	done := make(chan struct{})
	defer close(done)
	opened := make(chan struct{}, 1)
	ss, _ := f.session(t, done)
	open := ss.Open
	ss.Open = func() (net.Conn, func(), error) { opened <- struct{}{}; return open() }
	if err := f.server.Serve(ss, &wire.ReleaseRequest{SHA256: f.order.SHA256}, f.order); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		f.server.mu.Lock()
		busy := f.server.active["ns/h"] != nil
		f.server.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the transfer did not end")
		}
	}
	select {
	case <-opened:
		t.Fatal("the hub opened a stream for a binary it could not verify")
	default:
	}
}

// Only a roll-out under way gives orders; an aborted one its orders back;
// an ended or deleted one none, however long a host was away.
func TestOrdersOnlyFromRolloutsUnderWay(t *testing.T) {
	for _, tc := range []struct {
		phase  infrav1.AgentRolloutPhase
		revert bool
		exists bool
		want   bool
	}{
		{"", false, true, true},
		{infrav1.AgentRolloutProgressing, false, true, true},
		{infrav1.AgentRolloutComplete, false, true, false},
		{infrav1.AgentRolloutFailed, false, true, false},
		{infrav1.AgentRolloutAborting, true, true, true},
		{infrav1.AgentRolloutAborted, true, true, true},
		{infrav1.AgentRolloutAborted, false, true, false},
		{infrav1.AgentRolloutProgressing, false, false, false},
	} {
		var objs []client.Object
		if tc.exists {
			ro := &infrav1.EdgeAgentRollout{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}, Spec: infrav1.EdgeAgentRolloutSpec{Version: "v0.9.2"}}
			ro.Status.Phase = tc.phase
			objs = append(objs, ro)
		}
		orders := &Orders{Client: fake.NewClientBuilder().WithScheme(fleetscheme.New()).WithObjects(objs...).Build()}
		raw, _ := json.Marshal(infrav1.AgentReleaseOrder{Version: "v0.9.1", Rollout: "x", Revert: tc.revert})
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ns", Annotations: map[string]string{infrav1.AgentReleaseAnnotation: string(raw)}}}
		if got := orders.For(t.Context(), h) != nil; got != tc.want {
			t.Errorf("roll-out %q (exists %v), revert %v: ordered %v, want %v", tc.phase, tc.exists, tc.revert, got, tc.want)
		}
	}
}

// The hub carries a Kubernetes archive of a release it carries from the
// offset asked, fetched once from the release's url and checked against
// its sha256; one whose url serves something else is never passed on,
// nor one of a release the hosts fetch themselves; a cached archive
// survives the pruning of agent binaries.
func TestServeAnArchiveTheHubCarries(t *testing.T) {
	archive := bytes.Repeat([]byte("kubeadm kubelet images "), 50000)
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if r.URL.Path == "/bad" {
			_, _ = w.Write([]byte("not the archive"))
			return
		}
		_, _ = w.Write(archive)
	}))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:])
	release := func(name, path, sha string, delivery infrav1.KubernetesDelivery) *infrav1.EdgeKubernetesRelease {
		return &infrav1.EdgeKubernetesRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: infrav1.EdgeKubernetesReleaseSpec{Version: "v1.36.3", Delivery: delivery,
				Artifacts: []infrav1.KubernetesArtifact{{Arch: runtime.GOARCH, URL: srv.URL + path, SHA256: sha}}}}
	}
	badSHA, directSHA := strings.Repeat("b", 64), strings.Repeat("d", 64)
	c := fake.NewClientBuilder().WithScheme(fleetscheme.New()).WithObjects(
		release("hub", "/good", sha, infrav1.KubernetesDeliveryHub),
		release("bad", "/bad", badSHA, infrav1.KubernetesDeliveryHub),
		release("direct", "/good", directSHA, infrav1.KubernetesDeliveryDirect)).Build()
	server := NewServer(&Orders{Client: c}, logr.Discard(), Options{CacheDir: t.TempDir()})
	f := &fixture{server: server}
	done := make(chan struct{})
	defer close(done)
	ss, got := f.session(t, done)

	if err := server.ServeArchive(ss, &wire.ReleaseRequest{SHA256: sha, Offset: 4096}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, archive[4096:]) {
		t.Fatalf("sent %d bytes, want the %d after offset 4096", len(b), len(archive)-4096)
	}
	waitIdle := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			server.mu.Lock()
			busy := server.active["ns/h"] != nil
			server.mu.Unlock()
			if !busy {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the transfer did not end")
			}
		}
	}
	waitIdle()
	// A fetch a dead replica left half-way is pruned; one under way is not.
	stale, fresh := filepath.Join(server.opts.CacheDir, "ns", ".fetch-1"), filepath.Join(server.opts.CacheDir, "ns", ".fetch-2")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-server.opts.SourceTimeout - time.Minute)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	server.prune(t.Context())
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stale partial fetch survived the prune: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a fetch under way was pruned: %v", err)
	}
	if err := server.ServeArchive(ss, &wire.ReleaseRequest{SHA256: sha, Offset: int64(len(archive))}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; len(b) != 0 {
		t.Fatalf("an agent holding the whole archive was sent %d bytes more", len(b))
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the hub fetched the archive %d times, want once", n)
	}

	opened := make(chan struct{}, 4)
	open := ss.Open
	ss.Open = func() (net.Conn, func(), error) { opened <- struct{}{}; return open() }
	refusals := make(chan string, 4)
	ss.Refuse = func(sha, reason string) { refusals <- sha + ": " + reason }
	for _, other := range []string{badSHA, directSHA, badSHA} {
		waitIdle()
		if err := server.ServeArchive(ss, &wire.ReleaseRequest{SHA256: other}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-refusals:
			if !strings.HasPrefix(r, other+": ") {
				t.Errorf("refused %q, want the archive asked for (%s)", r, other)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the agent was not told that %s will not come", other)
		}
	}
	waitIdle()
	select {
	case <-opened:
		t.Fatal("the hub opened a stream for an archive it could not verify, or does not carry")
	default:
	}
	// The bad url was fetched once: the second ask was answered from the
	// failure remembered.
	if n := fetches.Load(); n != 2 {
		t.Errorf("the hub fetched %d times (the good archive once, the bad one once), want 2", n)
	}

	// A new session of the host (an agent back after a cut the hub has
	// not noticed yet) is served though the old one's transfer is queued.
	server.mu.Lock()
	server.active["ns/h"] = make(chan struct{})
	server.mu.Unlock()
	ss, got = f.session(t, done)
	if err := server.ServeArchive(ss, &wire.ReleaseRequest{SHA256: sha, Offset: 100}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, archive[100:]) {
		t.Errorf("the new session was sent %d bytes, want %d", len(b), len(archive)-100)
	}
}

// The hub fetches an archive a release names by an oci:// reference as
// the registry's blob of the archive's sha256, with the anonymous pull
// token the registry asks for, and carries it like any other.
func TestServeAnArchiveFromARegistry(t *testing.T) {
	archive := bytes.Repeat([]byte("kubeadm kubelet images "), 1000)
	sum := sha256.Sum256(archive)
	sha := hex.EncodeToString(sum[:])
	var srv *httptest.Server
	srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token":
			_, _ = w.Write([]byte(`{"access_token":"pull"}`))
		case r.URL.Path != "/v2/edge/kubernetes/blobs/sha256:"+sha:
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer pull":
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
		default:
			_, _ = w.Write(archive)
		}
	}))
	t.Cleanup(srv.Close)
	c := fake.NewClientBuilder().WithScheme(fleetscheme.New()).WithObjects(&infrav1.EdgeKubernetesRelease{
		ObjectMeta: metav1.ObjectMeta{Name: "oci", Namespace: "ns"},
		Spec: infrav1.EdgeKubernetesReleaseSpec{Version: "v1.36.3", Delivery: infrav1.KubernetesDeliveryHub,
			Artifacts: []infrav1.KubernetesArtifact{{Arch: runtime.GOARCH, URL: "oci://" + strings.TrimPrefix(srv.URL, "https://") + "/edge/kubernetes:v1.36.3", SHA256: sha}}}}).Build()
	server := NewServer(&Orders{Client: c}, logr.Discard(), Options{CacheDir: t.TempDir(), HTTPClient: srv.Client()})
	f := &fixture{server: server}
	done := make(chan struct{})
	defer close(done)
	ss, got := f.session(t, done)
	if err := server.ServeArchive(ss, &wire.ReleaseRequest{SHA256: sha}); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, archive) {
		t.Fatalf("sent %d bytes, want the %d-byte archive", len(b), len(archive))
	}
}
