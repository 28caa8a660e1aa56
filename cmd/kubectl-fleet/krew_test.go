package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The plugin installs the way users install it: the real krew, built from
// its Go module, installs `make krew`'s archive and manifest (which pass
// krew's own validation) into a fresh KREW_ROOT, and the real kubectl finds
// `kubectl fleet` through its plugin discovery.
func TestKrewInstall(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin", "k8s")
	}
	kubectl := filepath.Join(assets, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("kubectl not built (make test builds it into bin/k8s): %v", err)
		}
		t.Skipf("no %s: run `make test`", kubectl)
	}
	tmp := t.TempDir()
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	tools := filepath.Join(tmp, "tools")
	run(filepath.Join(root, "hack", "tools", "krew"), nil, "go", "build", "-o", tools+"/",
		"sigs.k8s.io/krew/cmd/krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest")
	dist := filepath.Join(tmp, "dist")
	run(root, nil, "make", "krew", "KREW_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH, "KREW_DIST="+dist, "KREW_VERSION=v0.1.0")
	manifest := filepath.Join(dist, "fleet.yaml")
	run(root, nil, filepath.Join(tools, "validate-krew-manifest"), "-manifest", manifest, "-skip-install")

	path := filepath.Join(tmp, "path")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(tools, "krew"), filepath.Join(path, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	krewRoot := filepath.Join(tmp, "krew-root")
	env := []string{"KREW_ROOT=" + krewRoot, "HOME=" + tmp,
		"PATH=" + strings.Join([]string{filepath.Join(krewRoot, "bin"), path, assets, os.Getenv("PATH")}, string(os.PathListSeparator))}
	archive := filepath.Join(dist, "kubectl-fleet_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz")
	run(tmp, env, kubectl, "krew", "install", "--manifest="+manifest, "--archive="+archive)
	out := run(tmp, env, kubectl, "fleet", "version", "--client")
	if strings.TrimSpace(out) != "kubectl-fleet: v0.1.0" {
		t.Errorf("kubectl fleet version --client: %q", out)
	}
	if out := run(tmp, env, kubectl, "fleet", "--help"); !strings.Contains(out, "kubectl fleet [command]") {
		t.Errorf("help does not read as kubectl fleet:\n%s", out)
	}
	for _, f := range []string{"kubectl-fleet", "kubectl_complete-fleet", "LICENSE"} {
		if _, err := os.Stat(filepath.Join(krewRoot, "store", "fleet", "v0.1.0", f)); err != nil {
			t.Errorf("installed plugin lacks %s: %v", f, err)
		}
	}
	checkStripped(t, filepath.Join(krewRoot, "store", "fleet", "v0.1.0", "kubectl-fleet"), root)
}

// checkStripped fails unless the released binary has neither a symbol table
// nor DWARF (-s -w) and names no path of the machine that built it
// (-trimpath): users download every byte of it.
func checkStripped(t *testing.T, bin, buildRoot string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("reading the released binary: %v", err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			t.Errorf("the released kubectl-fleet has section %s: build it with -ldflags \"-s -w\"", s.Name)
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(buildRoot+"/")) {
		t.Errorf("the released kubectl-fleet names the build directory %s: build it with -trimpath", buildRoot)
	}
	if fi, err := os.Stat(bin); err == nil {
		t.Logf("released kubectl-fleet: %.1f MB", float64(fi.Size())/1e6)
	}
}
