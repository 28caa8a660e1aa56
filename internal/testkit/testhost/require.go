package testhost

import (
	"os"
	"strings"
	"testing"
)

// Require stops tb when this machine cannot boot hosts from image (see
// Missing): it fails under CI=true, where a skip would hide a lost suite,
// and skips elsewhere. Then it sweeps what killed runs left behind.
func Require(tb testing.TB, image, who string) {
	tb.Helper()
	if missing := Missing(image); len(missing) > 0 {
		msg := who + " need " + strings.Join(missing, ", ") +
			" (.ci/run installs the Debian packages; make test-image builds the image into bin/edge-image)"
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
