package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/ociblob"
	"github.com/edgefleet/fleet/pkg/transport"
)

// Options bound what a replica spends on transfers.
type Options struct {
	// CacheDir keeps the binaries fetched from their urls, by sha256.
	CacheDir string
	// MaxTransfers run at once; more wait for a place.
	MaxTransfers int
	// BytesPerSecond is the replica's total rate to agents; 0 is unbounded.
	BytesPerSecond int64
	// SourceTimeout bounds one fetch of a binary from its url.
	SourceTimeout time.Duration
	// HTTPClient fetches from urls (nil: a default one).
	HTTPClient *http.Client
}

// Defaults of Options.
const (
	DefaultMaxTransfers   = 32
	DefaultBytesPerSecond = 64 << 20
)

// chunk is the unit of a transfer's writes and of the rate limiter.
const chunk = 32 << 10

// Server carries release binaries to agents.
type Server struct {
	orders  *Orders
	opts    Options
	log     logr.Logger
	limiter *rate.Limiter
	places  chan struct{}
	fetches singleflight.Group

	mu sync.Mutex
	// active holds, by host ("namespace/name"), the session whose transfer
	// is queued or under way: one at a time each. A new session of the
	// host may start one while its old session's winds down.
	active map[string]<-chan struct{}
	// failed holds archive fetches that failed, by namespace/sha256, until
	// when they are not tried again: a url that serves something else
	// must not be downloaded again for every host that asks.
	failed map[string]fetchFailure
}

// fetchFailure is a failed fetch of an archive into the cache.
type fetchFailure struct {
	err   error
	until time.Time
}

// failedFetchHold is how long a failed archive fetch is answered from
// memory.
const failedFetchHold = 5 * time.Minute

// NewServer returns a Server reading releases through orders.
func NewServer(orders *Orders, log logr.Logger, opts Options) *Server {
	if opts.MaxTransfers <= 0 {
		opts.MaxTransfers = DefaultMaxTransfers
	}
	if opts.SourceTimeout <= 0 {
		opts.SourceTimeout = 10 * time.Minute
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: opts.SourceTimeout}
	}
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(os.TempDir(), "fleet-hub-releases")
	}
	limit := rate.Inf
	if opts.BytesPerSecond > 0 {
		limit = rate.Limit(opts.BytesPerSecond)
	}
	return &Server{orders: orders, opts: opts, log: log.WithName("delivery"), limiter: rate.NewLimiter(limit, chunk),
		places: make(chan struct{}, opts.MaxTransfers), active: map[string]<-chan struct{}{}, failed: map[string]fetchFailure{}}
}

// Session is what a transfer needs of the agent's session.
type Session struct {
	// Host is "namespace/name"; Namespace is the host's.
	Host, Namespace string
	// Open opens a stream to the agent; release gives its place back.
	Open func() (st net.Conn, release func(), err error)
	// Done is closed when the session ends.
	Done <-chan struct{}
	// Protocol is the session's protocol version.
	Protocol int
	// Refuse tells the agent that its request for sha256 will not be
	// served, and why (nil: it is not told, and asks again).
	Refuse func(sha, reason string)
}

// ErrNotOrdered refuses a request for a binary the host was not ordered
// to run: an agent gets only its own host's release.
var ErrNotOrdered = errors.New("this host is not ordered to run a release with that sha256")

// Serve starts the transfer req asks for, unless one for the host is
// under way (the agent asks again when that one ends). ordered is the
// release order last pushed to the host.
func (s *Server) Serve(ss Session, req *wire.ReleaseRequest, ordered *wire.AgentReleaseOrder) error {
	if ordered == nil || ordered.SHA256 == "" || ordered.SHA256 != req.SHA256 {
		transfers.WithLabelValues("refused").Inc()
		return ErrNotOrdered
	}
	if req.Offset > ordered.Size {
		transfers.WithLabelValues("refused").Inc()
		return fmt.Errorf("offset %d is past the end of the %d-byte binary", req.Offset, ordered.Size)
	}
	size := ordered.Size
	s.start(ss, req, "release", func() (string, int64, error) {
		path, err := s.cached(ss.Namespace, req.SHA256, size)
		return path, size, err
	}, nil)
	return nil
}

// ServeArchive starts the transfer of a Kubernetes version's archive that
// the host was ordered to stage from the hub (the session checked that),
// fetched once into the replica's cache from its EdgeKubernetesRelease's
// url, unless one for the host is under way.
func (s *Server) ServeArchive(ss Session, req *wire.ReleaseRequest) error {
	s.start(ss, req, "archive", func() (string, int64, error) {
		return s.cachedArchive(ss.Namespace, req.SHA256)
	}, ss.Refuse)
	return nil
}

// start runs one transfer for the host in the background, unless one of
// the same session is queued or under way; source gives the cached file
// and its size. refuse, when set, tells the agent of a transfer that
// cannot be served (the source failed, a bad offset).
func (s *Server) start(ss Session, req *wire.ReleaseRequest, what string, source func() (string, int64, error), refuse func(sha, reason string)) {
	s.mu.Lock()
	if s.active[ss.Host] == ss.Done {
		s.mu.Unlock()
		return
	}
	s.active[ss.Host] = ss.Done
	s.mu.Unlock()
	transfersActive.Inc()
	go func() {
		defer func() {
			s.mu.Lock()
			if s.active[ss.Host] == ss.Done {
				delete(s.active, ss.Host)
			}
			s.mu.Unlock()
			transfersActive.Dec()
		}()
		result, err := s.transfer(ss, req, source)
		transfers.WithLabelValues(result).Inc()
		if err == nil {
			return
		}
		s.log.Info("A transfer ended early; the agent asks again", "EdgeHost", ss.Host, "what", what, "result", result, "reason", err.Error())
		if refuse != nil && (result == "source_failed" || result == "refused") {
			refuse(req.SHA256, err.Error())
		}
	}()
}

func (s *Server) transfer(ss Session, req *wire.ReleaseRequest, source func() (string, int64, error)) (string, error) {
	// The source first: a slow url must not hold a place other hosts'
	// transfers could use.
	path, size, err := source()
	if err != nil {
		return "source_failed", err
	}
	if req.Offset > size {
		return "refused", fmt.Errorf("offset %d is past the end of the %d bytes", req.Offset, size)
	}
	// Opened before the wait for a place: a prune meanwhile must not take
	// the file from under the transfer.
	f, err := os.Open(path)
	if err != nil {
		return "source_failed", err
	}
	defer f.Close()
	select {
	case s.places <- struct{}{}:
		defer func() { <-s.places }()
	case <-ss.Done:
		return "cut", errors.New("the session ended while the transfer waited for a place")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-ss.Done:
			cancel()
		case <-ctx.Done():
		}
	}()
	st, release, err := ss.Open()
	if err != nil {
		return "cut", err
	}
	defer release()
	defer st.Close()
	frame, err := wire.EncodeAs(ss.Protocol, &wire.ReleaseData{SHA256: req.SHA256, Offset: req.Offset, Size: size})
	if err != nil {
		return "cut", err
	}
	_ = st.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
	if err := wire.WriteFrame(st, frame); err != nil {
		return "cut", err
	}
	if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
		return "source_failed", err
	}
	buf := make([]byte, chunk)
	for sent := req.Offset; sent < size; {
		n, err := f.Read(buf[:min(int64(chunk), size-sent)])
		if n == 0 && err != nil {
			return "source_failed", fmt.Errorf("reading the cached binary: %w", err)
		}
		if err := s.limiter.WaitN(ctx, n); err != nil {
			return "cut", err
		}
		_ = st.SetWriteDeadline(time.Now().Add(transport.WriteTimeout))
		if _, err := st.Write(buf[:n]); err != nil {
			return "cut", err
		}
		transferBytes.Add(float64(n))
		sent += int64(n)
	}
	return "complete", nil
}

// cached is the path of the binary of sha256 for namespace's hosts,
// fetched from that namespace's release's url the first time and checked
// against the bundle's sha256 and size. Each namespace has its own copy:
// knowing another namespace's sha256 gets nobody its bytes.
func (s *Server) cached(namespace, sha string, size int64) (string, error) {
	path := filepath.Join(s.opts.CacheDir, namespace, sha)
	if fi, err := os.Stat(path); err == nil && fi.Size() == size {
		return path, nil
	}
	_, err, _ := s.fetches.Do(namespace+"/"+sha, func() (any, error) {
		// Not the asking session's context: other sessions wait on this
		// fetch, and it is worth finishing if the first one goes.
		ctx := context.Background()
		url, want, err := s.orders.source(ctx, namespace, sha)
		if err != nil {
			return nil, err
		}
		if want != size {
			return nil, fmt.Errorf("the release says %d bytes, the order %d", want, size)
		}
		err = s.fetch(ctx, url, path, sha, size)
		if err != nil {
			sourceFetches.WithLabelValues("failed").Inc()
			s.log.Error(err, "Cannot fetch a release binary into the hub's cache", "url", url, "sha256", sha)
			return nil, err
		}
		sourceFetches.WithLabelValues("ok").Inc()
		s.log.Info("Fetched a release binary into the hub's cache", "url", url, "sha256", sha, "bytes", size)
		s.prune(ctx)
		return nil, nil
	})
	return path, err
}

// cachedArchive is the path and size of the archive of sha256 for
// namespace's hosts, fetched from the url of that namespace's
// EdgeKubernetesRelease the hub carries, the first time, and checked
// against its sha256. Only a whole, checked archive is in the cache.
func (s *Server) cachedArchive(namespace, sha string) (string, int64, error) {
	path := filepath.Join(s.opts.CacheDir, namespace, sha)
	if fi, err := os.Stat(path); err == nil {
		return path, fi.Size(), nil
	}
	key := namespace + "/" + sha
	s.mu.Lock()
	failed, ok := s.failed[key]
	s.mu.Unlock()
	if ok && time.Now().Before(failed.until) {
		return "", 0, failed.err
	}
	_, err, _ := s.fetches.Do(key, func() (any, error) {
		ctx := context.Background()
		url, err := s.orders.archiveSource(ctx, namespace, sha)
		if err != nil {
			return nil, err
		}
		if err := s.fetch(ctx, url, path, sha, -1); err != nil {
			sourceFetches.WithLabelValues("failed").Inc()
			s.log.Error(err, "Cannot fetch a Kubernetes archive into the hub's cache", "url", url, "sha256", sha)
			err = fmt.Errorf("the hub cannot fetch the archive (it tries again after %s): %w", failedFetchHold, err)
			s.mu.Lock()
			s.failed[key] = fetchFailure{err: err, until: time.Now().Add(failedFetchHold)}
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Lock()
		delete(s.failed, key)
		s.mu.Unlock()
		sourceFetches.WithLabelValues("ok").Inc()
		s.log.Info("Fetched a Kubernetes archive into the hub's cache", "url", url, "sha256", sha)
		s.prune(ctx)
		return nil, nil
	})
	if err != nil {
		return "", 0, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	return path, fi.Size(), nil
}

// prune removes the cached files no EdgeAgentRelease, nor
// EdgeKubernetesRelease the hub carries, names any more.
func (s *Server) prune(ctx context.Context) {
	list := &infrav1.EdgeAgentReleaseList{}
	if err := s.orders.Client.List(ctx, list); err != nil {
		return
	}
	archives := &infrav1.EdgeKubernetesReleaseList{}
	if err := s.orders.Client.List(ctx, archives); err != nil {
		return
	}
	keep := map[string]bool{}
	for _, r := range list.Items {
		for _, art := range r.Spec.Artifacts {
			if a, err := Artifact(art.Bundle); err == nil {
				keep[filepath.Join(r.Namespace, a.SHA256)] = true
			}
		}
	}
	for _, r := range archives.Items {
		for _, art := range r.Spec.Artifacts {
			if r.ThroughHub() {
				keep[filepath.Join(r.Namespace, art.SHA256)] = true
			}
		}
	}
	namespaces, _ := os.ReadDir(s.opts.CacheDir)
	for _, ns := range namespaces {
		files, _ := os.ReadDir(filepath.Join(s.opts.CacheDir, ns.Name()))
		for _, f := range files {
			path := filepath.Join(s.opts.CacheDir, ns.Name(), f.Name())
			switch {
			case f.IsDir():
			case strings.HasPrefix(f.Name(), ".fetch-"):
				// Left by a replica that died mid-fetch: one under way
				// is written to more often than its timeout.
				if info, err := f.Info(); err == nil && time.Since(info.ModTime()) > s.opts.SourceTimeout {
					_ = os.Remove(path)
				}
			case !strings.HasPrefix(f.Name(), ".") && !keep[filepath.Join(ns.Name(), f.Name())]:
				_ = os.Remove(path)
			}
		}
	}
}

// get asks for url: over HTTP, or for the blob of digest sha256:sha of
// an oci:// repository.
func (s *Server) get(ctx context.Context, url, sha string) (*http.Response, error) {
	if ociref.IsRef(url) {
		ref, err := ociref.Parse(url)
		if err != nil {
			return nil, err
		}
		return ociblob.Get(ctx, s.opts.HTTPClient, ref, sha, nil)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return s.opts.HTTPClient.Do(req)
}

// fetch downloads url to path if it has sha256 and size bytes (size < 0:
// any size up to wire.MaxTransferSize).
func (s *Server) fetch(ctx context.Context, url, path, sha string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.SourceTimeout)
	defer cancel()
	resp, err := s.get(ctx, url, sha)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", url, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fetch-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	limit := size
	if size < 0 {
		limit = wire.MaxTransferSize
	}
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, limit+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("fetching %s: %w", url, err)
	case size < 0 && n > limit:
		return fmt.Errorf("%s holds more than the %d bytes the hub carries", url, limit)
	case size >= 0 && n != size:
		return fmt.Errorf("%s holds %d bytes or more; its bundle says %d", url, n, size)
	case hex.EncodeToString(h.Sum(nil)) != sha:
		return fmt.Errorf("%s is not the binary its bundle signs (sha256 %s, want %s)", url, hex.EncodeToString(h.Sum(nil)), sha)
	}
	return os.Rename(tmp.Name(), path)
}
