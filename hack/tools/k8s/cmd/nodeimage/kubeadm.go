package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// kubeadmOptions are the flags of `nodeimage kubeadm`.
type kubeadmOptions struct {
	kubeadm string
	binDir  string
	outDir  string
}

// recipe says how an image kubeadm lists is made from the binary of its
// short name.
type recipe struct {
	entrypoint string // empty: the binary
	// tools returns the host files the image carries besides the binary.
	tools func() ([]string, error)
	// symlinks are extra links in the image, path -> target.
	symlinks map[string]string
	// module, when set, is the Go module the binary is built from, whose
	// version must be the image's tag.
	module string
}

// buildable are the images nodeimage knows how to build, by short name;
// kubeadm listing any other fails the run.
var buildable = map[string]recipe{
	"kube-apiserver":          {},
	"kube-controller-manager": {},
	"kube-scheduler":          {},
	"etcd":                    {},
	// The CRI runs the sandbox image's own entrypoint, and upstream's is /pause.
	"pause": {entrypoint: "/pause"},
	// kubeadm's Deployment passes only args, so the entrypoint is upstream's.
	"coredns": {entrypoint: "/coredns", module: "github.com/coredns/coredns"},
	// kube-proxy's DaemonSet runs /usr/local/bin/kube-proxy, which execs
	// iptables, iptables-save and iptables-restore (and nft, to clean up
	// after the nftables mode).
	"kube-proxy": {tools: kubeProxyTools, symlinks: kubeProxyLinks},
}

// xtablesDir holds the iptables extensions xtables-nft-multi dlopens to
// parse matches and targets (Debian's iptables package, in the machine's
// multiarch directory: the image is of the machine's architecture).
var xtablesDir = "/usr/lib/" + map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH] + "/xtables"

// kubeProxyLinks put every iptables name kube-proxy may call on the nft
// backend: with legacy tables beside nft ones iptables warns and rules
// split between the two.
var kubeProxyLinks = func() map[string]string {
	links := map[string]string{}
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			links["/usr/sbin/"+family+suffix] = "xtables-nft-multi"
		}
	}
	return links
}()

// kubeProxyTools are the files of Debian's iptables and nftables packages
// kube-proxy needs: the nft flavour of iptables, its extensions, and nft.
func kubeProxyTools() ([]string, error) {
	tools := []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/nft"}
	for _, t := range tools {
		if _, err := os.Stat(t); err != nil {
			return nil, missingToolError{fmt.Sprintf("the kube-proxy image packs %s from Debian's iptables and nftables packages (apt-get install iptables nftables)", t)}
		}
	}
	exts, err := filepath.Glob(filepath.Join(xtablesDir, "*.so"))
	if err != nil {
		return nil, err
	}
	if len(exts) == 0 {
		return nil, missingToolError{fmt.Sprintf("the kube-proxy image packs iptables' extensions from %s, which has none (apt-get install iptables)", xtablesDir)}
	}
	return append(tools, exts...), nil
}

// missingToolError says which package of the machine an image packs is
// absent. Such an image is skipped, not the whole set: `make k8s` must
// work on a machine without them (`make demo` installs them, then builds
// the image), and the real-node kit reports the image missing.
type missingToolError struct{ msg string }

func (e missingToolError) Error() string { return e.msg }

// buildKubeadmImages builds into opts.outDir every image kubeadm's version
// lists that has a binary in opts.binDir, printing a line per image.
func buildKubeadmImages(opts kubeadmOptions, stdout io.Writer) error {
	version, err := kubeadmOutput(opts.kubeadm, "version", "-o", "short")
	if err != nil {
		return err
	}
	version = strings.TrimSpace(version)
	if version == "" || strings.ContainsAny(version, " \n") {
		return fmt.Errorf("%s version -o short printed %q, not a version", opts.kubeadm, version)
	}
	list, err := kubeadmOutput(opts.kubeadm, "config", "images", "list", "--kubernetes-version", version)
	if err != nil {
		return err
	}
	images := strings.Fields(list)
	if len(images) == 0 {
		return fmt.Errorf("%s config images list printed no image", opts.kubeadm)
	}
	// Check every name and every host tool before building any, so a
	// surprise fails fast and leaves no half-built set.
	specs := make([]imageSpec, 0, len(images))
	for _, image := range images {
		short, err := shortName(image)
		if err != nil {
			return err
		}
		r, ok := buildable[short]
		if !ok {
			return fmt.Errorf("kubeadm %s lists %s, which nodeimage does not know how to build", version, image)
		}
		spec := imageSpec{name: image, binaries: []string{filepath.Join(opts.binDir, short)}, entrypoint: r.entrypoint, symlinks: r.symlinks}
		// A binary that is not Go's (a test's stand-in) or not there yet
		// has no module to check; the build below names what is wrong.
		if info, err := buildinfo.ReadFile(spec.binaries[0]); err == nil && r.module != "" {
			if err := checkModuleVersion(info, spec.binaries[0], r.module, image); err != nil {
				return err
			}
		}
		if r.tools != nil {
			if spec.hostFiles, err = r.tools(); err != nil {
				if missing := (missingToolError{}); errors.As(err, &missing) {
					fmt.Fprintf(stdout, "   %-60s skipped: %s\n", image, missing.msg)
					continue
				}
				return fmt.Errorf("%s: %w", image, err)
			}
		}
		specs = append(specs, spec)
	}
	if err := os.MkdirAll(opts.outDir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding nodeimage's own binary: %w", err)
	}
	for _, spec := range specs {
		image := spec.name
		out := filepath.Join(opts.outDir, filepath.Base(spec.binaries[0])+".tar")
		// nodeimage itself is an input: a newer one may write another format.
		upToDate, err := newerThan(out, append([]string{spec.binaries[0], opts.kubeadm, self}, spec.hostFiles...)...)
		if err != nil {
			return fmt.Errorf("%s: %w", image, err)
		}
		if upToDate {
			fmt.Fprintf(stdout, "   %-60s up to date: %s\n", image, out)
			continue
		}
		start := time.Now()
		if _, err := buildArchive(spec, out); err != nil {
			return fmt.Errorf("building %s: %w", image, err)
		}
		info, err := os.Stat(out)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "   %-60s built: %s (%.1f MB, %.1fs)\n", image, out, float64(info.Size())/1e6, time.Since(start).Seconds())
	}
	return nil
}

// kubeadmOutput runs kubeadm with args and returns what it printed on stdout.
func kubeadmOutput(kubeadm string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kubeadm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", kubeadm, strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String(), nil
}

// shortName returns the last element of an image's repository:
// registry.k8s.io/coredns/coredns:v1.12.1 gives coredns.
func shortName(image string) (string, error) {
	tag, err := name.NewTag(image)
	if err != nil {
		return "", fmt.Errorf("kubeadm listed %q: %w", image, err)
	}
	return path.Base(tag.RepositoryStr()), nil
}

// newerThan reports whether file exists and was modified after every one of
// inputs, which must exist.
func newerThan(file string, inputs ...string) (bool, error) {
	out, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		for _, in := range inputs {
			if _, err := os.Stat(in); err != nil {
				return false, err
			}
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	newer := true
	for _, in := range inputs {
		info, err := os.Stat(in)
		if err != nil {
			return false, err
		}
		if !out.ModTime().After(info.ModTime()) {
			newer = false
		}
	}
	return newer, nil
}

// checkModuleVersion refuses to tag binary as image unless the Go module it
// is built from has the image's version: a kubeadm that asks for another
// CoreDNS than hack/tools/k8s/go.mod pins would otherwise get a mislabelled
// image.
func checkModuleVersion(info *buildinfo.BuildInfo, binary, module, image string) error {
	_, tag, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	for _, d := range info.Deps {
		if d.Path == module {
			if d.Version != tag {
				return fmt.Errorf("kubeadm lists %s, but %s is built from %s %s: pin %s in hack/tools/k8s/go.mod", image, binary, module, d.Version, tag)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: %s is not built from %s", image, binary, module)
}
