package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const usage = `nodeimage builds container images from local binaries, as OCI layout
tarballs for "ctr -n k8s.io images import".

Usage:
  nodeimage build --name IMAGE --binary FILE [--binary FILE...] --out FILE.tar [--entrypoint PATH]
  nodeimage kubeadm --kubeadm FILE --bin-dir DIR --out-dir DIR

Commands:
  build     One single-layer linux/amd64 image: each binary at /usr/local/bin/<name>
            (and a symlink /<name>), the loader and shared libraries they link,
            /etc/passwd, /etc/group, /tmp.
  kubeadm   The images "kubeadm config images list" names for the kubeadm's own
            version, built from the binaries of the same names in --bin-dir
            into --out-dir/<image>.tar; kube-proxy's also carries iptables
            (nft backend) and nft from the machine's Debian packages.

Run "nodeimage COMMAND -h" for the flags of a command.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "nodeimage:", err)
		os.Exit(2)
	}
}

// run dispatches to a command; it returns flag.ErrHelp after printing help.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "kubeadm":
		return runKubeadm(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodeimage build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var spec imageSpec
	var binaries stringList
	var out string
	fs.StringVar(&spec.name, "name", "", "image name and tag, e.g. registry.k8s.io/kube-apiserver:v1.36.3 (required)")
	fs.Var(&binaries, "binary", "a binary to put at /usr/local/bin/<its name>; repeat for more (at least one)")
	fs.StringVar(&out, "out", "", "the OCI layout tarball to write (required)")
	fs.StringVar(&spec.entrypoint, "entrypoint", "", "the image's entrypoint (default: /usr/local/bin/<name> when there is one binary, none otherwise)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: nodeimage build --name IMAGE --binary FILE [--binary FILE...] --out FILE.tar [--entrypoint PATH]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("build: unexpected arguments %q", fs.Args())
	case spec.name == "":
		return errors.New("build: --name is required")
	case len(binaries) == 0:
		return errors.New("build: at least one --binary is required")
	case out == "":
		return errors.New("build: --out is required")
	}
	spec.binaries = binaries
	id, err := buildArchive(spec, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s, image ID %s\n", out, spec.name, id)
	return nil
}

func runKubeadm(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nodeimage kubeadm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts kubeadmOptions
	fs.StringVar(&opts.kubeadm, "kubeadm", "", "the kubeadm binary whose image list to build (required)")
	fs.StringVar(&opts.binDir, "bin-dir", "", "the directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, coredns, etcd and pause (required)")
	fs.StringVar(&opts.outDir, "out-dir", "", "where to write <image>.tar, e.g. kube-apiserver.tar (required; created if missing)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: nodeimage kubeadm --kubeadm FILE --bin-dir DIR --out-dir DIR")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("kubeadm: unexpected arguments %q", fs.Args())
	case opts.kubeadm == "":
		return errors.New("kubeadm: --kubeadm is required")
	case opts.binDir == "":
		return errors.New("kubeadm: --bin-dir is required")
	case opts.outDir == "":
		return errors.New("kubeadm: --out-dir is required")
	}
	return buildKubeadmImages(opts, stdout)
}
