package ocilayout

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// fixedTime is every entry's mtime, so the archive depends only on the
// contents.
var fixedTime = time.Unix(0, 0).UTC()

// WriteImage writes img to out as an OCI layout tarball named tag. out is
// replaced only once it is complete.
func WriteImage(out string, tag name.Tag, img v1.Image) error {
	return write(out, func(p layout.Path) error { return p.AppendImage(img, layout.WithAnnotations(names(tag))) })
}

// WriteIndex writes idx (with every image in it) to out as an OCI layout
// tarball named tag. out is replaced only once it is complete.
func WriteIndex(out string, tag name.Tag, idx v1.ImageIndex) error {
	return write(out, func(p layout.Path) error { return p.AppendIndex(idx, layout.WithAnnotations(names(tag))) })
}

// names are both names an importer looks for: OCI's ref.name (the tag, as
// skopeo reads it) and containerd's full image name.
func names(tag name.Tag) map[string]string {
	return map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
		"io.containerd.image.name":          containerdName(tag),
	}
}

// containerdName is the name containerd and the kubelet look an image up
// by: Docker Hub's is docker.io/…, where go-containerregistry says
// index.docker.io.
func containerdName(tag name.Tag) string {
	registry := tag.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	return registry + "/" + tag.RepositoryStr() + ":" + tag.TagStr()
}

func write(out string, add func(layout.Path) error) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+"-layout-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := add(p); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarDir(dir, out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// Extract unpacks an archive written here into dir, where the layout
// package reads it.
func Extract(archive, dir string) error {
	return untar(archive, dir)
}

// tarDir writes the OCI layout in dir as a tarball at out (paths relative
// to dir, sorted, fixed mtimes); out is replaced only once it is complete.
func tarDir(dir, out string) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		paths = append(paths, p)
		return nil
	}); err != nil {
		return err
	}
	slices.Sort(paths)
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+"-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	// CreateTemp's 0600 would keep the archive from other users.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range paths {
		if err := addToTar(tw, dir, p); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func addToTar(tw *tar.Writer, dir, p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: fixedTime, Typeflag: tar.TypeReg, Size: info.Size()}
	if info.IsDir() {
		hdr.Name, hdr.Mode, hdr.Typeflag, hdr.Size = hdr.Name+"/", 0o755, tar.TypeDir, 0
		return tw.WriteHeader(hdr)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}

// untar extracts an archive written by tarDir into dir.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", archive, err)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %q is outside the archive", archive, hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(target, tr); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q is neither a file nor a directory", archive, hdr.Name)
		}
	}
}

func writeFile(target string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	f, err := os.Create(target)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
