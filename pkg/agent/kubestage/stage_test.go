package kubestage_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/kubestage"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

type entry struct {
	name string
	body string
	mode int64
	typ  byte
}

// archive makes a tar (gzipped when gz) of entries.
func archive(t *testing.T, gz bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	} else {
		w = tar.NewWriter(&buf)
	}
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: typ, Linkname: "/etc/passwd"}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := w.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := w.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// version is a staged version's layout, with an image big enough that a
// download takes several reads.
func version(t *testing.T, gz bool) []byte {
	return archive(t, gz,
		entry{name: "./kubeadm", body: "#!/bin/sh\necho kubeadm\n", mode: 0o755},
		entry{name: "./kubelet", body: "#!/bin/sh\necho kubelet\n", mode: 0o755},
		entry{name: "images/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "images/pause.tar", body: strings.Repeat("layer", 200_000), mode: 0o644})
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// server serves body with Range support; cutAt > 0 makes the first
// request end after that many bytes.
type server struct {
	body   []byte
	cutAt  int
	ranges bool
	mu     sync.Mutex
	seen   []string // Range headers received
	sent   int
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.seen = append(s.seen, r.Header.Get("Range"))
	first := len(s.seen) == 1
	s.mu.Unlock()
	if first && s.cutAt > 0 {
		w.Header().Set("Content-Length", fmtInt(len(s.body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(s.body[:s.cutAt])
		s.count(s.cutAt)
		// Drop the connection mid-body, as a cut uplink does.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	if !s.ranges {
		r.Header.Del("Range")
	}
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "a.tar", time.Time{}, bytes.NewReader(s.body))
	s.count(cw.n)
}

func (s *server) count(n int) {
	s.mu.Lock()
	s.sent += n
	s.mu.Unlock()
}

type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += n
	return n, err
}

func fmtInt(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func order(url string, body []byte) wire.StageOrder {
	return wire.StageOrder{Version: "v1.36.3", URL: url, SHA256: sum(body)}
}

func plenty(string) (int64, error) { return 1 << 40, nil }

// A version's archive is fetched, checked and unpacked into place; a
// second order for it fetches nothing.
func TestStageFetchesChecksAndUnpacks(t *testing.T) {
	for _, gz := range []bool{false, true} {
		body := version(t, gz)
		srv := &server{body: body, ranges: true}
		ts := httptest.NewServer(srv)
		defer ts.Close()
		dir := t.TempDir()
		s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty})
		var last, total int64
		if err := s.Stage(context.Background(), order(ts.URL+"/k.tar", body), func(d, tot int64) { last, total = d, tot }); err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		if err := kubestage.Complete(dir, "v1.36.3"); err != nil {
			t.Fatalf("gzip %v: not staged: %v", gz, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "v1.36.3", "images", "pause.tar")); err != nil || len(b) != 1_000_000 {
			t.Fatalf("gzip %v: image %d bytes, %v", gz, len(b), err)
		}
		if last != int64(len(body)) || total != int64(len(body)) {
			t.Errorf("gzip %v: progress ended at %d of %d, want %d", gz, last, total, len(body))
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) != 1 || filepath.Base(left[0]) != ".partial" {
			t.Errorf("gzip %v: left behind %v", gz, left)
		}
		if err := s.Stage(context.Background(), order(ts.URL+"/k.tar", body), func(int64, int64) {}); err != nil || len(srv.seen) != 1 {
			t.Errorf("gzip %v: staging again: %v, %d requests", gz, err, len(srv.seen))
		}
	}
}

// A transfer cut mid-way resumes where it stopped: the second request asks
// for the rest only, and nothing is sent twice.
func TestStageResumesACutTransfer(t *testing.T) {
	body := version(t, false)
	srv := &server{body: body, cutAt: len(body) / 3, ranges: true}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := t.TempDir()
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty})
	err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {})
	var se *kubestage.Error
	if !errors.As(err, &se) || se.Permanent || !strings.Contains(err.Error(), "the next try resumes there") {
		t.Fatalf("a cut transfer: %v", err)
	}
	if kubestage.Complete(dir, "v1.36.3") == nil {
		t.Fatal("staged after a cut")
	}
	if err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {}); err != nil {
		t.Fatalf("resuming: %v", err)
	}
	if want := "bytes=" + fmtInt(len(body)/3) + "-"; len(srv.seen) != 2 || srv.seen[1] != want {
		t.Errorf("requests' ranges %q, want the second %q", srv.seen, want)
	}
	if srv.sent != len(body) {
		t.Errorf("sent %d bytes for a %d-byte archive", srv.sent, len(body))
	}
	if kubestage.Complete(dir, "v1.36.3") != nil {
		t.Error("not staged after resuming")
	}
}

// A server that cannot resume sends the archive again from its start.
func TestStageStartsAgainWithoutRanges(t *testing.T) {
	body := version(t, true)
	srv := &server{body: body, cutAt: len(body) / 2}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	dir := t.TempDir()
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty})
	if err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {}); err == nil {
		t.Fatal("a cut transfer staged")
	}
	if err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {}); err != nil {
		t.Fatalf("again: %v", err)
	}
	if kubestage.Complete(dir, "v1.36.3") != nil {
		t.Error("not staged")
	}
}

// An archive that does not match the release's sha256 is deleted, nothing
// is unpacked, and the error says not to fetch it again.
func TestStageRefusesAChecksumMismatch(t *testing.T) {
	body := version(t, false)
	ts := httptest.NewServer(&server{body: body, ranges: true})
	defer ts.Close()
	dir := t.TempDir()
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty})
	o := order(ts.URL, body)
	o.SHA256 = sum([]byte("something else"))
	err := s.Stage(context.Background(), o, func(int64, int64) {})
	var se *kubestage.Error
	if !errors.As(err, &se) || !se.Permanent || !strings.Contains(err.Error(), "the archive's sha256 is "+sum(body)+", the release says "+o.SHA256) {
		t.Fatalf("a mismatch: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, ".partial")); len(entries) != 0 {
		t.Errorf("kept %d partial files", len(entries))
	}
	if _, err := os.Stat(filepath.Join(dir, "v1.36.3")); !os.IsNotExist(err) {
		t.Errorf("a version directory was made: %v", err)
	}
}

// Archives that are not a staged version, or would write outside it, are
// refused without a trace.
func TestStageRefusesBadArchives(t *testing.T) {
	for name, body := range map[string][]byte{
		"a link":          archive(t, false, entry{name: "kubeadm", typ: tar.TypeSymlink}),
		"a path outside":  archive(t, false, entry{name: "../../etc/cron.d/x", body: "x", mode: 0o644}),
		"an absolute one": archive(t, false, entry{name: "/etc/x", body: "x", mode: 0o644}),
		"no kubelet":      archive(t, false, entry{name: "kubeadm", body: "x", mode: 0o755}),
		"not executable":  archive(t, false, entry{name: "kubeadm", body: "x", mode: 0o644}, entry{name: "kubelet", body: "x", mode: 0o644}),
		"not a tar":       bytes.Repeat([]byte("not a tar file "), 100),
	} {
		ts := httptest.NewServer(&server{body: body, ranges: true})
		dir := t.TempDir()
		s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty})
		err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {})
		ts.Close()
		var se *kubestage.Error
		if !errors.As(err, &se) || !se.Permanent {
			t.Errorf("%s: %v, want a permanent error", name, err)
			continue
		}
		left, _ := filepath.Glob(filepath.Join(dir, "*"))
		partial, _ := filepath.Glob(filepath.Join(dir, ".partial", "*"))
		if len(left) != 1 || len(partial) != 0 {
			t.Errorf("%s: left %v %v", name, left, partial)
		}
	}
}

// A disk that cannot hold the archive is told before anything is written;
// one that fills up mid-way keeps what arrived, and both say the disk is
// full so the agent tries again later.
func TestStageOnAFullDisk(t *testing.T) {
	body := version(t, false)
	ts := httptest.NewServer(&server{body: body, ranges: true})
	defer ts.Close()

	dir := t.TempDir()
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: func(string) (int64, error) { return 1000, nil }})
	err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {})
	var se *kubestage.Error
	if !errors.As(err, &se) || !se.DiskFull || se.Permanent || !strings.Contains(err.Error(), "1000 are free") {
		t.Fatalf("too little space: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, ".partial")); len(entries) != 0 {
		t.Errorf("wrote %d files on a disk that cannot hold the archive", len(entries))
	}

	if os.Geteuid() != 0 {
		t.Skip("a real full disk needs a tmpfs mount, which needs root")
	}
	small := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mounting a small tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", small).Run() })
	// The file system's own count would refuse up front: lie, to reach the
	// write that fails.
	s = kubestage.New(kubestage.Options{Dir: small, FreeBytes: plenty})
	err = s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {})
	if !errors.As(err, &se) || !se.DiskFull || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("a disk filling up: %v", err)
	}
	if kubestage.Complete(small, "v1.36.3") == nil {
		t.Error("staged on a full disk")
	}
}

// A download that stops receiving is cut after the stall timeout.
func TestStageCutsAStalledDownload(t *testing.T) {
	body := version(t, false)
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmtInt(len(body)))
		_, _ = w.Write(body[:1000])
		w.(http.Flusher).Flush()
		<-release
	}))
	defer ts.Close()
	defer close(release)
	s := kubestage.New(kubestage.Options{Dir: t.TempDir(), FreeBytes: plenty, StallTimeout: 200 * time.Millisecond})
	err := s.Stage(context.Background(), order(ts.URL, body), func(int64, int64) {})
	if err == nil || !strings.Contains(err.Error(), "nothing received for 200ms") {
		t.Fatalf("a stalled download: %v", err)
	}
}

// hubSource plays the hub's end of a session: it sends the archive from
// the offset asked, cut once at cutAt.
type hubSource struct {
	body    []byte
	cutAt   int
	offsets []int64
}

func (h *hubSource) Open(_ context.Context, _ wire.StageOrder, offset int64) (io.ReadCloser, int64, int64, error) {
	h.offsets = append(h.offsets, offset)
	end := len(h.body)
	if h.cutAt > 0 && int(offset) < h.cutAt {
		end = h.cutAt
	}
	r := io.MultiReader(bytes.NewReader(h.body[offset:end]), errReader{})
	if end == len(h.body) {
		r = bytes.NewReader(h.body[offset:])
	}
	return io.NopCloser(r), offset, int64(len(h.body)), nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("stream reset") }

// An order the hub carries comes through the agent's session, not a url,
// and goes on from the bytes the host holds after a cut; an agent that
// cannot take archives from the hub fails such an order for good.
func TestStageFromTheHub(t *testing.T) {
	body := version(t, true)
	sum := sha256.Sum256(body)
	o := wire.StageOrder{Version: "v1.36.3", SHA256: hex.EncodeToString(sum[:]), Hub: true}
	dir := t.TempDir()
	hub := &hubSource{body: body, cutAt: len(body) / 2}
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty, Hub: hub})
	if !s.TakesArchivesFromHub() {
		t.Error("a stager with a hub source says it takes no archives from the hub")
	}
	err := s.Stage(context.Background(), o, func(int64, int64) {})
	var se *kubestage.Error
	if !errors.As(err, &se) || se.Permanent || !strings.Contains(err.Error(), "from the hub: cut at byte") {
		t.Fatalf("a cut transfer: %v", err)
	}
	if err := s.Stage(context.Background(), o, func(int64, int64) {}); err != nil {
		t.Fatalf("going on: %v", err)
	}
	if len(hub.offsets) != 2 || hub.offsets[0] != 0 || hub.offsets[1] != int64(len(body)/2) {
		t.Errorf("asked the hub from offsets %v, want 0 then %d", hub.offsets, len(body)/2)
	}
	if err := kubestage.Complete(dir, "v1.36.3"); err != nil {
		t.Fatalf("not staged: %v", err)
	}

	noHub := kubestage.New(kubestage.Options{Dir: t.TempDir(), FreeBytes: plenty})
	err = noHub.Stage(context.Background(), o, func(int64, int64) {})
	if !errors.As(err, &se) || !se.Permanent || noHub.TakesArchivesFromHub() {
		t.Errorf("an order the hub carries, to a stager without a hub source: %v", err)
	}
}

// An archive pushed to an OCI registry is fetched as the blob its sha256
// names, from the repository an oci:// url gives, with the anonymous pull
// token the registry's challenge asks for; a cut transfer resumes.
func TestStageFromARegistry(t *testing.T) {
	body := version(t, false)
	blobs := &server{body: body, cutAt: len(body) / 2, ranges: true}
	var ts *httptest.Server
	ts = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/token" && r.URL.Query().Get("scope") == "repository:edge/kubernetes:pull":
			_, _ = w.Write([]byte(`{"token":"pull"}`))
		case r.URL.Path != "/v2/edge/kubernetes/blobs/sha256:"+sum(body):
			http.NotFound(w, r)
		case r.Header.Get("Authorization") != "Bearer pull":
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+ts.URL+`/token",service="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
		default:
			blobs.ServeHTTP(w, r)
		}
	}))
	defer ts.Close()
	dir := t.TempDir()
	s := kubestage.New(kubestage.Options{Dir: dir, FreeBytes: plenty, Client: ts.Client()})
	if !s.FetchesFromOCI() {
		t.Error("the stager does not say it fetches from registries")
	}
	o := order("oci://"+strings.TrimPrefix(ts.URL, "https://")+"/edge/kubernetes:v1.36.3", body)
	if err := s.Stage(context.Background(), o, func(int64, int64) {}); err == nil || !strings.Contains(err.Error(), "the next try resumes there") {
		t.Fatalf("a cut transfer: %v", err)
	}
	if err := s.Stage(context.Background(), o, func(int64, int64) {}); err != nil {
		t.Fatalf("resuming: %v", err)
	}
	if err := kubestage.Complete(dir, "v1.36.3"); err != nil {
		t.Fatalf("not staged: %v", err)
	}
	if want := "bytes=" + fmtInt(len(body)/2) + "-"; len(blobs.seen) != 2 || blobs.seen[1] != want || blobs.sent != len(body) {
		t.Errorf("blob requests' ranges %q (want the second %q), %d bytes sent for %d", blobs.seen, want, blobs.sent, len(body))
	}

	bad := order("oci://"+strings.TrimPrefix(ts.URL, "https://")+"/Edge/kubernetes", body)
	var se *kubestage.Error
	if err := s.Stage(context.Background(), withVersion(bad, "v1.36.4"), func(int64, int64) {}); !errors.As(err, &se) || !se.Permanent {
		t.Errorf("a bad repository name: %v, want a permanent error", err)
	}
}

func withVersion(o wire.StageOrder, v string) wire.StageOrder {
	o.Version = v
	return o
}
