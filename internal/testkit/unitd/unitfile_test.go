package unitd

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadWithDropIns(t *testing.T) {
	etc, lib := t.TempDir(), t.TempDir()
	write(t, filepath.Join(lib, "x.service"), "[Service]\nExecStart=/bin/hidden\n")
	write(t, filepath.Join(etc, "x.service"), `[Unit]
Description=The x service
[Service]
ExecStart=/usr/bin/old --flag
Environment=A=1
EnvironmentFile=-/etc/default/x
KillMode=process
`)
	write(t, filepath.Join(lib, "x.service.d", "10-args.conf"), "[Service]\nExecStart=/bin/hidden-by-etc\n")
	write(t, filepath.Join(etc, "x.service.d", "10-args.conf"), `[Service]
ExecStart=
ExecStart=-/usr/bin/new $ARGS \
  "${ONE} word"
ExecStartPre=-/bin/true
`)
	write(t, filepath.Join(lib, "x.service.d", "20-more.conf"), `[Service]
Environment="B=two words" C=3
EnvironmentFile=/run/x.env
Restart=always
RestartSec=2s
TimeoutStopSec=1min 30s
Type=notify
`)
	write(t, filepath.Join(lib, "x.service.d", "ignored.txt"), "[Service]\nRestart=no\n")
	u, err := Load([]string{etc, lib}, "x.service")
	if err != nil {
		t.Fatal(err)
	}
	want := &Unit{
		Name: "x.service", Description: "The x service",
		Files:        []string{filepath.Join(etc, "x.service"), filepath.Join(etc, "x.service.d", "10-args.conf"), filepath.Join(lib, "x.service.d", "20-more.conf")},
		ExecStartPre: []Command{{Words: []string{"/bin/true"}, IgnoreFailure: true}},
		ExecStart:    []Command{{Words: []string{"/usr/bin/new", "$ARGS", "${ONE} word"}, IgnoreFailure: true}},
		Environment:  []string{"A=1", "B=two words", "C=3"},
		EnvFiles:     []EnvFile{{Path: "/etc/default/x", Optional: true}, {Path: "/run/x.env"}},
		Restart:      "always", RestartDelay: 2 * time.Second, KillMode: "process", StopTimeout: 90 * time.Second, Type: "notify",
	}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("Load\n got %+v\nwant %+v", u, want)
	}

	if _, err := Load([]string{etc, lib}, "missing.service"); err == nil || !strings.Contains(err.Error(), ErrNotFound.Error()) {
		t.Errorf("missing unit: %v", err)
	}
	write(t, filepath.Join(etc, "two.service"), "[Service]\nExecStart=/bin/a\nExecStart=/bin/b\n")
	write(t, filepath.Join(etc, "bad.service"), "[Service]\nExecStart=/bin/a\nRestart=sometimes\n")
	for _, name := range []string{"two.service", "bad.service"} {
		if _, err := Load([]string{etc}, name); err == nil {
			t.Errorf("%s loaded", name)
		}
	}
}

func TestExpand(t *testing.T) {
	env := map[string]string{"ARGS": " --a=1   --b ", "ONE": "x y", "EMPTY": ""}
	for _, tc := range []struct{ in, want []string }{
		{[]string{"/bin/k", "$ARGS", "$UNSET", "$EMPTY", "--c"}, []string{"/bin/k", "--a=1", "--b", "--c"}},
		{[]string{"${ONE}", "pre-${ONE}-post", "${UNSET}", "$$ARGS", "a$ARGS"}, []string{"x y", "pre-x y-post", "", "$ARGS", "a$ARGS"}},
	} {
		if got := Expand(tc.in, env); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Expand(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestEnvReadsFilesAtEachCall(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "flags.env")
	write(t, f, "# kubeadm writes this\nKUBELET_KUBEADM_ARGS=\"--a=1 --b=2\"\n\n; other comment\nA = 'from file'\n")
	u := &Unit{Environment: []string{"A=unit", "B=unit"}, EnvFiles: []EnvFile{{Path: filepath.Join(dir, "none"), Optional: true}, {Path: f}}}
	env, err := u.Env()
	if err != nil {
		t.Fatal(err)
	}
	if env["KUBELET_KUBEADM_ARGS"] != "--a=1 --b=2" || env["A"] != "from file" || env["B"] != "unit" || env["PATH"] == "" {
		t.Errorf("env %q", env)
	}
	write(t, f, "A=changed\n")
	if env, err := u.Env(); err != nil || env["A"] != "changed" {
		t.Errorf("after the file changed: %q %v", env, err)
	}
	u.EnvFiles = append(u.EnvFiles, EnvFile{Path: filepath.Join(dir, "required")})
	if _, err := u.Env(); err == nil {
		t.Error("a missing required EnvironmentFile is no error")
	}
}

func TestParseTimespan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"10": 10 * time.Second, "0.5": 500 * time.Millisecond, "500ms": 500 * time.Millisecond,
		"1min 30s": 90 * time.Second, "2h": 2 * time.Hour, "5sec": 5 * time.Second,
	} {
		if got, err := parseTimespan(in); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "ten", "5 fortnights"} {
		if _, err := parseTimespan(in); err == nil {
			t.Errorf("parseTimespan(%q) gave no error", in)
		}
	}
}
