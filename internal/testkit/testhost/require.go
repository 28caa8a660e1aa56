package testhost

import (
	"os"
	"strings"
	"testing"
)

// Require stops tb when this machine cannot make hosts (see Missing): it
// fails under CI=true, where a skip would hide a lost suite, and skips
// elsewhere. Then it sweeps what killed runs left behind.
func Require(tb testing.TB, k8sDir, who string) {
	tb.Helper()
	if missing := Missing(k8sDir); len(missing) > 0 {
		msg := who + " need " + strings.Join(missing, ", ") +
			" (.ci/run installs containerd, runc, dbus, containernetworking-plugins and procps; make k8s builds bin/k8s)"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	swept, err := Sweep()
	for _, s := range swept {
		tb.Log(s)
	}
	if err != nil {
		tb.Fatal(err)
	}
}
