package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// libraryDirs are where shared libraries are looked up, in this order: the
// x86_64 Debian and Ubuntu multiarch directories, then the classic one. The
// library keeps the directory it was found in, where the loader looks too.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// fixedModTime is every entry's mtime, so the layer's digest depends only on
// the contents.
var fixedModTime = time.Unix(0, 0).UTC()

// binDir is where the binaries go in the image.
const binDir = "/usr/local/bin"

// imageFile is one file of the layer: its absolute path in the image and the
// host file that holds its contents, or the path in the image it is a symlink
// to when another path already holds the same host file.
type imageFile struct {
	path   string
	source string
	mode   fs.FileMode
	linkTo string
}

// layerFiles returns the binaries at binDir, the host files at their own
// paths, and the loader and shared libraries they need, sorted by path. A path asked for twice from the same
// host file is given once; a second path to the same host file (the loader
// is both PT_INTERP and a DT_NEEDED of libc) is a symlink to the first.
func layerFiles(binaries, hostFiles []string) ([]imageFile, error) {
	files := map[string]imageFile{}
	byRealPath := map[string]string{} // host file, symlinks resolved -> its path in the image
	add := func(imagePath, source string) error {
		if prev, ok := files[imagePath]; ok {
			if prev.source != source {
				return fmt.Errorf("%s is wanted from both %s and %s", imagePath, prev.source, source)
			}
			return nil
		}
		info, err := os.Stat(source)
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", source)
		}
		real, err := filepath.EvalSymlinks(source)
		if err != nil {
			return err
		}
		if first, ok := byRealPath[real]; ok {
			files[imagePath] = imageFile{path: imagePath, source: source, linkTo: first}
			return nil
		}
		byRealPath[real] = imagePath
		files[imagePath] = imageFile{path: imagePath, source: source, mode: info.Mode().Perm()}
		return nil
	}
	var pending []string // ELF files whose dependencies are still to be read
	for _, b := range binaries {
		if err := add(path.Join(binDir, filepath.Base(b)), b); err != nil {
			return nil, fmt.Errorf("binary: %w", err)
		}
		pending = append(pending, b)
	}
	for _, f := range hostFiles {
		if !filepath.IsAbs(f) {
			return nil, fmt.Errorf("host file %q: want an absolute path", f)
		}
		if err := add(f, f); err != nil {
			return nil, fmt.Errorf("host file: %w", err)
		}
		pending = append(pending, f)
	}
	seen := map[string]bool{}
	for len(pending) > 0 {
		file := pending[0]
		pending = pending[1:]
		if seen[file] {
			continue
		}
		seen[file] = true
		interp, needed, err := elfDependencies(file)
		if err != nil {
			return nil, err
		}
		if interp != "" {
			if err := add(interp, interp); err != nil {
				return nil, fmt.Errorf("the loader of %s: %w", file, err)
			}
			pending = append(pending, interp)
		}
		for _, lib := range needed {
			found, err := findLibrary(lib)
			if err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
			if err := add(found, found); err != nil {
				return nil, fmt.Errorf("%s needs %s: %w", file, lib, err)
			}
			pending = append(pending, found)
		}
	}
	sorted := make([]imageFile, 0, len(files))
	for _, f := range files {
		sorted = append(sorted, f)
	}
	slices.SortFunc(sorted, func(a, b imageFile) int { return strings.Compare(a.path, b.path) })
	return sorted, nil
}

// elfDependencies returns the program interpreter (PT_INTERP) and the
// DT_NEEDED libraries of an ELF file; both are empty for a static binary.
func elfDependencies(file string) (string, []string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return "", nil, fmt.Errorf("reading %s as ELF: %w", file, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return "", nil, fmt.Errorf("%s is for %s, not x86-64", file, f.Machine)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", nil, fmt.Errorf("reading the interpreter of %s: %w", file, err)
		}
		interp = string(bytes.TrimRight(b, "\x00"))
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("reading the libraries %s needs: %w", file, err)
	}
	return interp, needed, nil
}

// findLibrary returns the path of a shared library in the first of
// libraryDirs that has it.
func findLibrary(name string) (string, error) {
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("library %q is a path; only names are looked up", name)
	}
	for _, dir := range libraryDirs {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("not found in %s", strings.Join(libraryDirs, ", "))
}

// configFiles are the files of the layer that are not from the host. The
// runtime mounts /etc/hosts and /etc/resolv.conf; nsswitch.conf keeps glibc's
// lookups to files and DNS, as in distroless images.
var configFiles = map[string]string{
	"/etc/passwd":        "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
	"/etc/group":         "root:x:0:\nnobody:x:65534:\n",
	"/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}

// writeLayerTar writes the layer: the directories, each file of files, the
// config files, a symlink /<name> to each binary, the extra symlinks, and
// /tmp. Entries come in
// a fixed order with fixed owners and mtimes.
func writeLayerTar(w io.Writer, files []imageFile, symlinks map[string]string) error {
	type entry struct {
		hdr    tar.Header
		source string // host file to copy, for a regular file from the host
		data   string // contents, for a config file
	}
	var entries []entry
	dirs := map[string]bool{"/tmp": true}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, f := range files {
		addParents(f.path)
		if f.linkTo != "" {
			entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: f.path, Linkname: f.linkTo, Mode: 0o777}})
			continue
		}
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: f.path, Mode: int64(f.mode)}, source: f.source})
		if path.Dir(f.path) == binDir {
			link := "/" + path.Base(f.path)
			entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: link, Linkname: f.path, Mode: 0o777}})
		}
	}
	for p, target := range symlinks {
		if slices.ContainsFunc(files, func(f imageFile) bool { return f.path == p }) {
			return fmt.Errorf("%s is both a file and a symlink to %s", p, target)
		}
		addParents(p)
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777}})
	}
	for p, data := range configFiles {
		addParents(p)
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(data))}, data: data})
	}
	for d := range dirs {
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		entries = append(entries, entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}})
	}
	// Sorted by path, a directory comes before what it holds.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.hdr.Name, b.hdr.Name) })

	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := e.hdr
		hdr.Name = strings.TrimPrefix(hdr.Name, "/")
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		hdr.ModTime = fixedModTime
		if err := writeEntry(tw, hdr, e.source, e.data); err != nil {
			return fmt.Errorf("writing %s into the layer: %w", e.hdr.Name, err)
		}
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, hdr tar.Header, source, data string) error {
	var r io.Reader = strings.NewReader(data)
	if source != "" {
		f, err := os.Open(source)
		if err != nil {
			return err
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return err
		}
		hdr.Size = info.Size()
		r = f
	}
	if err := tw.WriteHeader(&hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("%s changed while it was read (%d bytes, then %d)", source, hdr.Size, n)
	}
	return nil
}
