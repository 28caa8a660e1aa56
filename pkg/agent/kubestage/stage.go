package kubestage

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgefleet/fleet/pkg/contract/ociref"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/ociblob"
)

// Defaults bounding what one order may make the agent do.
const (
	// DefaultMaxArchiveBytes bounds a download.
	DefaultMaxArchiveBytes = 8 << 30
	// maxUnpackedBytes bounds what an archive may unpack to, and
	// maxEntries its files: a small archive must not fill the disk.
	maxUnpackedFactor = 4
	maxEntries        = 4096
	// DefaultStallTimeout cuts a download that receives nothing this long.
	DefaultStallTimeout = time.Minute
	// partialDir holds downloads in progress, named by their sha256.
	partialDir = ".partial"
)

// Options configure a Stager.
type Options struct {
	// Dir is the staging directory on the host (e.g.
	// /opt/fleet/kubernetes).
	Dir string
	// Client fetches archives; default a client that uses the
	// environment's proxy settings.
	Client *http.Client
	// MaxArchiveBytes bounds a download (default DefaultMaxArchiveBytes).
	MaxArchiveBytes int64
	// StallTimeout cuts a download that receives nothing for this long
	// (default DefaultStallTimeout).
	StallTimeout time.Duration
	// FreeBytes tells how much the file system holding dir can take;
	// default statfs.
	FreeBytes func(dir string) (int64, error)
	// Hub brings the archives of orders that say Hub, through the agent's
	// session; nil: such orders fail for good.
	Hub Source
}

// Stager fetches and stages versions. Stage is not safe for concurrent
// calls on the same version.
type Stager struct{ opts Options }

// New makes a Stager, filling defaults.
func New(opts Options) *Stager {
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			ResponseHeaderTimeout: time.Minute, TLSHandshakeTimeout: 30 * time.Second}}
	}
	if opts.MaxArchiveBytes <= 0 {
		opts.MaxArchiveBytes = DefaultMaxArchiveBytes
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = DefaultStallTimeout
	}
	if opts.FreeBytes == nil {
		opts.FreeBytes = statfsFree
	}
	return &Stager{opts: opts}
}

// TakesArchivesFromHub reports whether the stager fetches the archives
// the hub carries (Options.Hub).
func (s *Stager) TakesArchivesFromHub() bool { return s.opts.Hub != nil }

// FetchesFromOCI says the stager fetches archives from oci:// references.
func (s *Stager) FetchesFromOCI() bool { return true }

// Error is a failed Stage. Permanent errors (the archive is not what the
// release says) are not worth another download of the same URL and
// sha256; the others (a cut, a full disk, a server error) are.
type Error struct {
	Err       error
	Permanent bool
	// DiskFull: the disk cannot hold the archive or what it unpacks to.
	DiskFull bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether fetching the same order again is pointless.
func (e *Error) IsPermanent() bool { return e.Permanent }

// IsDiskFull reports whether the disk could not hold the version.
func (e *Error) IsDiskFull() bool { return e.DiskFull }

// Stage makes o's version staged: it downloads the archive (resuming what
// an earlier call left), checks its sha256, unpacks it and renames it into
// place. Done already is not an error. progress hears how much of the
// archive is on the host; total is 0 when the server did not say.
func (s *Stager) Stage(ctx context.Context, o wire.StageOrder, progress func(done, total int64)) error {
	if Complete(s.opts.Dir, o.Version) == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(s.opts.Dir, partialDir), 0o700); err != nil {
		return s.classify(fmt.Errorf("making %s: %w", filepath.Join(s.opts.Dir, partialDir), err))
	}
	archive := filepath.Join(s.opts.Dir, partialDir, o.SHA256)
	total, err := s.download(ctx, o, archive, progress)
	if err != nil {
		return err
	}
	if err := verify(archive, o.SHA256); err != nil {
		_ = os.Remove(archive)
		return &Error{Err: fmt.Errorf("%s from %s: %w; the archive was deleted and is not fetched again until the release's url or sha256 changes",
			o.Version, from(o), err), Permanent: true}
	}
	if err := s.unpack(archive, o.Version, total); err != nil {
		var se *Error
		if errors.As(err, &se) && se.Permanent {
			// It matched its sha256: fetching it again gives the same.
			_ = os.Remove(archive)
		}
		return err
	}
	_ = os.Remove(archive)
	return nil
}

// Source gives an archive's bytes from an offset: the order's url over
// HTTP, a blob of its oci:// repository, or the hub through the agent's
// session.
type Source interface {
	// Open returns the archive's bytes from offset on; start is where
	// they begin (offset, or 0 when the source sends it all again) and
	// total the archive's size (0 when the source does not say). An
	// error that is not an *Error is worth another try.
	Open(ctx context.Context, o wire.StageOrder, offset int64) (body io.ReadCloser, start, total int64, err error)
}

// source is where o's archive comes from.
func (s *Stager) source(o wire.StageOrder) (Source, error) {
	if ociref.IsRef(o.URL) {
		return ociSource{s.opts.Client}, nil
	}
	if !o.Hub {
		return httpSource{s.opts.Client}, nil
	}
	if s.opts.Hub == nil {
		return nil, &Error{Err: fmt.Errorf("%s: the hub carries this archive, and this agent cannot take it through its session", o.Version), Permanent: true}
	}
	return s.opts.Hub, nil
}

// from names where o's archive comes from, for messages.
func from(o wire.StageOrder) string {
	if o.Hub {
		return "the hub"
	}
	return o.URL
}

// download brings the archive to path, resuming a partial file; it returns
// the archive's size.
func (s *Stager) download(ctx context.Context, o wire.StageOrder, file string, progress func(done, total int64)) (int64, error) {
	have := int64(0)
	if info, err := os.Stat(file); err == nil {
		have = info.Size()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	src, err := s.source(o)
	if err != nil {
		return 0, err
	}
	body, start, total, err := src.Open(ctx, o, have)
	if err != nil {
		var se *Error
		if !errors.As(err, &se) {
			err = &Error{Err: fmt.Errorf("downloading %s from %s: %w", o.Version, from(o), err)}
		}
		return 0, err
	}
	defer func() { _ = body.Close() }()
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	switch {
	case start == have && total > 0 && have >= total:
		// The partial file is the whole archive already.
		return have, nil
	case start == 0:
		have = 0
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	case start != have:
		return 0, &Error{Err: fmt.Errorf("downloading %s from %s: resumed at byte %d, not at %d", o.Version, from(o), start, have)}
	}
	if total > s.opts.MaxArchiveBytes {
		return 0, &Error{Err: fmt.Errorf("%s from %s is %d bytes, more than the %d an archive may have", o.Version, from(o), total, s.opts.MaxArchiveBytes), Permanent: true}
	}
	if total > 0 {
		// The rest of the download, and about as much again to unpack it.
		need := 2*total - have
		if free, err := s.opts.FreeBytes(s.opts.Dir); err == nil && free < need {
			return 0, &Error{DiskFull: true, Err: fmt.Errorf("%s needs %d bytes free under %s (the rest of a %d-byte archive and its unpacked files); %d are free",
				o.Version, need, s.opts.Dir, total, free)}
		}
	}
	f, err := os.OpenFile(file, flags, 0o600)
	if err != nil {
		return 0, s.classify(fmt.Errorf("opening %s: %w", file, err))
	}
	defer func() { _ = f.Close() }()
	progress(have, total)

	// Cut a download that stalls: a dead uplink can keep a TCP
	// connection open for hours.
	stall := time.AfterFunc(s.opts.StallTimeout, func() {
		cancel(fmt.Errorf("nothing received for %s", s.opts.StallTimeout))
	})
	defer stall.Stop()
	// The stream of the hub's source does not end with ctx by itself.
	stop := context.AfterFunc(ctx, func() { _ = body.Close() })
	defer stop()
	buf := make([]byte, 256<<10)
	limit := s.opts.MaxArchiveBytes - have
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			stall.Reset(s.opts.StallTimeout)
			if int64(n) > limit {
				return 0, &Error{Err: fmt.Errorf("%s from %s is more than the %d bytes an archive may have", o.Version, from(o), s.opts.MaxArchiveBytes), Permanent: true}
			}
			if _, werr := f.Write(buf[:n]); werr != nil {
				return 0, s.classify(fmt.Errorf("writing %s: %w", file, werr))
			}
			limit -= int64(n)
			have += int64(n)
			progress(have, total)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				rerr = cause
			}
			return 0, &Error{Err: fmt.Errorf("downloading %s from %s: cut at byte %d: %w; the next try resumes there", o.Version, from(o), have, rerr)}
		}
	}
	if total > 0 && have != total {
		return 0, &Error{Err: fmt.Errorf("downloading %s from %s: the source ended at byte %d of %d; the next try resumes there", o.Version, from(o), have, total)}
	}
	if err := f.Sync(); err != nil {
		return 0, s.classify(fmt.Errorf("writing %s: %w", file, err))
	}
	return have, nil
}

// httpSource downloads the order's url, resuming with a Range request.
type httpSource struct{ client *http.Client }

func (h httpSource) Open(ctx context.Context, o wire.StageOrder, have int64) (io.ReadCloser, int64, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return nil, 0, 0, &Error{Err: fmt.Errorf("%s: url %q: %w", o.Version, o.URL, err), Permanent: true}
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := h.client.Do(req)
	return ranged(o, resp, err, have)
}

// ociSource downloads the archive as a blob of the order's oci://
// repository, by its sha256, resuming with a Range request.
type ociSource struct{ client *http.Client }

func (s ociSource) Open(ctx context.Context, o wire.StageOrder, have int64) (io.ReadCloser, int64, int64, error) {
	ref, err := ociref.Parse(o.URL)
	if err != nil {
		return nil, 0, 0, &Error{Err: fmt.Errorf("%s: %w", o.Version, err), Permanent: true}
	}
	header := http.Header{}
	if have > 0 {
		header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := ociblob.Get(ctx, s.client, ref, o.SHA256, header)
	return ranged(o, resp, err, have)
}

// ranged is the archive's bytes from have on in resp, the answer to a
// request for them.
func ranged(o wire.StageOrder, resp *http.Response, err error, have int64) (io.ReadCloser, int64, int64, error) {
	if err != nil {
		return nil, 0, 0, &Error{Err: fmt.Errorf("downloading %s from %s: %w", o.Version, o.URL, err)}
	}
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		start, size, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have {
			_ = resp.Body.Close()
			return nil, 0, 0, &Error{Err: fmt.Errorf("downloading %s from %s: the server resumed at %q, not at byte %d",
				o.Version, o.URL, resp.Header.Get("Content-Range"), have)}
		}
		return resp.Body, start, size, nil
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		// The partial file is the whole archive already.
		_ = resp.Body.Close()
		return io.NopCloser(strings.NewReader("")), have, have, nil
	case resp.StatusCode == http.StatusOK:
		// A server without ranges sends it all again.
		return resp.Body, 0, max(resp.ContentLength, 0), nil
	}
	_ = resp.Body.Close()
	// A URL that is not there will not appear by asking again soon; but it
	// may once the operator uploads it, so it is not permanent.
	return nil, 0, 0, &Error{Err: fmt.Errorf("downloading %s from %s: %s", o.Version, o.URL, resp.Status)}
}

// classify wraps err, marking a full disk as such.
func (s *Stager) classify(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		free, _ := s.opts.FreeBytes(s.opts.Dir)
		return &Error{DiskFull: true, Err: fmt.Errorf("%w (%d bytes free under %s); free space and the agent tries again", err, free, s.opts.Dir)}
	}
	return &Error{Err: err}
}

// contentRange parses "bytes START-END/SIZE"; SIZE may be "*" (0).
func contentRange(h string) (start, size int64, ok bool) {
	rest, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, sz, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if sz != "*" {
		if size, err = strconv.ParseInt(sz, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, size, true
}

func verify(file, want string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("the archive's sha256 is %s, the release says %s", got, want)
	}
	return nil
}

// unpack extracts the archive into a temporary directory and renames it to
// <dir>/<version> once it holds a whole staged version.
func (s *Stager) unpack(archive, version string, size int64) error {
	tmp, err := os.MkdirTemp(s.opts.Dir, "."+version+".unpacking-")
	if err != nil {
		return s.classify(fmt.Errorf("unpacking %s: %w", version, err))
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := s.extract(archive, tmp, maxUnpackedFactor*max(size, 1<<20)); err != nil {
		var se *Error
		if errors.As(err, &se) {
			return err
		}
		return s.classify(fmt.Errorf("unpacking %s: %w", version, err))
	}
	if err := Complete(filepath.Dir(tmp), filepath.Base(tmp)); err != nil {
		return &Error{Err: fmt.Errorf("the archive of %s is not a staged version: %w", version, err), Permanent: true}
	}
	dst := filepath.Join(s.opts.Dir, version)
	// A directory left by hand or by an older agent, without the binaries.
	if _, err := os.Stat(dst); err == nil {
		old := dst + ".replaced-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := os.Rename(dst, old); err != nil {
			return &Error{Err: fmt.Errorf("moving the incomplete %s aside: %w", dst, err)}
		}
		defer func() { _ = os.RemoveAll(old) }()
	}
	if err := os.Rename(tmp, dst); err != nil {
		return &Error{Err: fmt.Errorf("putting %s in place: %w", dst, err)}
	}
	return syncDir(s.opts.Dir)
}

func (s *Stager) extract(archive, dst string, maxBytes int64) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return &Error{Err: fmt.Errorf("not a gzip file: %w", err), Permanent: true}
		}
		defer func() { _ = gz.Close() }()
		r = gz
	}
	tr := tar.NewReader(r)
	written, entries := int64(0), 0
	bad := func(format string, args ...any) error {
		return &Error{Err: fmt.Errorf("the archive "+format, args...), Permanent: true}
	}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return bad("is not a tar file: %v", err)
		}
		if entries++; entries > maxEntries {
			return bad("has more than %d entries", maxEntries)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return bad("holds %q, outside its top directory", hdr.Name)
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if written += hdr.Size; written > maxBytes {
				return bad("unpacks to more than %d bytes", maxBytes)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := writeFile(target, tr, hdr.Size, os.FileMode(hdr.Mode)&0o755); err != nil {
				return err
			}
		default:
			// Links and devices could point outside the staging directory.
			return bad("holds %q, which is neither a file nor a directory", hdr.Name)
		}
	}
}

func writeFile(name string, r io.Reader, size int64, mode os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Complete says why <dir>/<version> is not a staged version (nil when it
// is): kubeadm and kubelet must be executable files.
func Complete(dir, version string) error {
	for _, name := range []string{"kubeadm", "kubelet"} {
		p := filepath.Join(dir, version, name)
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("no %s", name)
		}
		if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable file", name)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

func statfsFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
