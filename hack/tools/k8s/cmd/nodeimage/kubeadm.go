package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
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

// buildable are the images built from a binary of the same name, with the
// entrypoint each one needs; the others kubeadm lists are in notBuilt.
var buildable = map[string]string{
	"kube-apiserver":          "",
	"kube-controller-manager": "",
	"kube-scheduler":          "",
	"etcd":                    "",
	// The CRI runs the sandbox image's own entrypoint, and upstream's is /pause.
	"pause": "/pause",
}

// notBuilt are images kubeadm lists that no binary here is built for; the
// hosts skip the kubeadm addons that use them.
var notBuilt = map[string]bool{"coredns": true, "kube-proxy": true}

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
	// Check every name before building any, so a surprise fails fast.
	for _, image := range images {
		short, err := shortName(image)
		if err != nil {
			return err
		}
		if _, ok := buildable[short]; !ok && !notBuilt[short] {
			return fmt.Errorf("kubeadm %s lists %s, which nodeimage does not know how to build", version, image)
		}
	}
	if err := os.MkdirAll(opts.outDir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding nodeimage's own binary: %w", err)
	}
	for _, image := range images {
		short, _ := shortName(image)
		entrypoint, ok := buildable[short]
		if !ok {
			fmt.Fprintf(stdout, "   %-60s skipped: no binary is built for it (skip its kubeadm addon)\n", image)
			continue
		}
		binary := filepath.Join(opts.binDir, short)
		out := filepath.Join(opts.outDir, short+".tar")
		// nodeimage itself is an input: a newer one may write another format.
		upToDate, err := newerThan(out, binary, opts.kubeadm, self)
		if err != nil {
			return fmt.Errorf("%s: %w", image, err)
		}
		if upToDate {
			fmt.Fprintf(stdout, "   %-60s up to date: %s\n", image, out)
			continue
		}
		start := time.Now()
		if _, err := buildArchive(imageSpec{name: image, binaries: []string{binary}, entrypoint: entrypoint}, out); err != nil {
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
