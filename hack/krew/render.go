//go:build ignore

// render fills krew.yaml from the archives in a directory:
//
//	go run hack/krew/render.go -version v0.1.0 -dir dist/krew > dist/krew/fleet.yaml
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"text/template"
)

type platform struct{ OS, Arch, Archive, SHA256, Bin string }

func main() {
	version := flag.String("version", "v0.1.0", "plugin version (semver with a leading v)")
	dir := flag.String("dir", "dist/krew", "directory with kubectl-fleet_<os>_<arch>.tar.gz archives")
	tmpl := flag.String("template", "krew.yaml", "manifest template")
	base := flag.String("base-url", "https://github.com/edgefleet/fleet/releases/download", "where release archives are published")
	flag.Parse()
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(*version) {
		fail(fmt.Errorf("version %q is not semver with a leading v", *version))
	}
	archives, err := filepath.Glob(filepath.Join(*dir, "kubectl-fleet_*_*.tar.gz"))
	if err != nil || len(archives) == 0 {
		fail(fmt.Errorf("no archives in %s (run make krew)", *dir))
	}
	sort.Strings(archives)
	re := regexp.MustCompile(`kubectl-fleet_([a-z]+)_([a-z0-9]+)\.tar\.gz$`)
	var ps []platform
	for _, a := range archives {
		m := re.FindStringSubmatch(a)
		f, err := os.Open(a)
		if err != nil {
			fail(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			fail(err)
		}
		f.Close()
		bin := "kubectl-fleet"
		if m[1] == "windows" {
			bin += ".exe"
		}
		ps = append(ps, platform{OS: m[1], Arch: m[2], Archive: filepath.Base(a), SHA256: hex.EncodeToString(h.Sum(nil)), Bin: bin})
	}
	t := template.Must(template.ParseFiles(*tmpl))
	if err := t.Execute(os.Stdout, map[string]any{"Version": *version, "Platforms": ps, "BaseURL": *base}); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "render:", err)
	os.Exit(1)
}
