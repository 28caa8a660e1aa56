package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

const usage = `hubimage builds fleet-hub's multi-platform OCI image from local binaries and
pushes it, without a container runtime.

Usage:
  hubimage build --name IMAGE:TAG --binary OS/ARCH=FILE [--binary OS/ARCH=FILE...] --out FILE.tar
  hubimage push --archive FILE.tar --to REGISTRY/REPOSITORY:TAG

Commands:
  build   One image per --binary (the binary at /fleet-hub, user 65532, no
          shell), joined in an OCI image index, written to --out as an OCI
          layout tarball; prints the index digest.
  push    Pushes the index (and every image in it) of an archive made by
          build to a registry, with the credentials of ~/.docker/config.json.

Run "hubimage COMMAND -h" for the flags of a command.
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "hubimage:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "push":
		return runPush(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return flag.ErrHelp
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", args[0])
	}
}

// platformBinaries is the repeatable --binary OS/ARCH=FILE flag.
type platformBinaries []platformBinary

type platformBinary struct{ os, arch, file string }

func (l *platformBinaries) String() string {
	s := make([]string, len(*l))
	for i, b := range *l {
		s[i] = b.os + "/" + b.arch + "=" + b.file
	}
	return strings.Join(s, ",")
}

func (l *platformBinaries) Set(v string) error {
	plat, file, ok := strings.Cut(v, "=")
	goos, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || goos == "" || arch == "" || file == "" {
		return fmt.Errorf("%q: want OS/ARCH=FILE, e.g. linux/amd64=dist/linux-amd64/fleet-hub", v)
	}
	for _, b := range *l {
		if b.os == goos && b.arch == arch {
			return fmt.Errorf("%s/%s given twice", goos, arch)
		}
	}
	*l = append(*l, platformBinary{os: goos, arch: arch, file: file})
	return nil
}

func runBuild(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hubimage build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var spec buildSpec
	fs.StringVar(&spec.name, "name", "", "image name and tag recorded in the archive, e.g. ghcr.io/edgefleet/fleet-hub:v0.1.0 (required)")
	fs.Var(&spec.binaries, "binary", "OS/ARCH=FILE: a static fleet-hub for that platform; repeat for more (at least one)")
	fs.StringVar(&spec.out, "out", "", "the OCI layout tarball to write (required)")
	fs.StringVar(&spec.caBundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA certificates to put at /etc/ssl/certs/ca-certificates.crt; empty: none")
	fs.StringVar(&spec.version, "version", "", "the version recorded in the org.opencontainers.image.version annotation")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("build: unexpected arguments %q", fs.Args())
	case spec.name == "":
		return errors.New("build: --name is required")
	case len(spec.binaries) == 0:
		return errors.New("build: at least one --binary is required")
	case spec.out == "":
		return errors.New("build: --out is required")
	}
	digest, err := build(spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s@%s (%s)\n", spec.out, spec.name, digest, spec.binaries.platforms())
	return nil
}

func (l platformBinaries) platforms() string {
	s := make([]string, len(l))
	for i, b := range l {
		s[i] = b.os + "/" + b.arch
	}
	return strings.Join(s, ", ")
}

func runPush(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hubimage push", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var archive, to string
	fs.StringVar(&archive, "archive", "", "an OCI layout tarball written by hubimage build (required)")
	fs.StringVar(&to, "to", "", "where to push, REGISTRY/REPOSITORY:TAG (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("push: unexpected arguments %q", fs.Args())
	case archive == "":
		return errors.New("push: --archive is required")
	case to == "":
		return errors.New("push: --to is required")
	}
	digest, err := push(archive, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s@%s\n", to, digest)
	return nil
}
