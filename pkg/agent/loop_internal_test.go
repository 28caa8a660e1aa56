package agent

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/utils/ptr"
)

// The watchdog's times keep their monotonic reading ("m=" in their
// String): an edge box's clock stepped by NTP mid-bootstrap must not make a
// worker that is making progress look stuck for the length of the step.
func TestWatchdogTimesAreMonotonic(t *testing.T) {
	var b busySince
	b.progress()
	if s := b.since().String(); !strings.Contains(s, " m=") {
		t.Errorf("a worker's progress time has no monotonic reading: %s", s)
	}
	a := &Agent{}
	a.lastHealthy.Store(ptr.To(time.Now()))
	if s := a.LastHealthy().String(); !strings.Contains(s, " m=") {
		t.Errorf("the last healthy moment has no monotonic reading: %s", s)
	}
}

// A failure too long for the status keeps the step that failed and the
// end of the output, where kubeadm says why.
func TestTruncateKeepsBothEnds(t *testing.T) {
	msg := "runcmd 1/1 failed: `kubeadm init`: exit status 1\n--- output (tail) ---\n" +
		strings.Repeat("[preflight] a line of progress é\n", 400) + "[ERROR CRI]: container runtime is not running"
	got := truncate(msg, 4000)
	if len(got) > 4000 || !utf8.ValidString(got) {
		t.Fatalf("truncate: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if !strings.HasPrefix(got, "runcmd 1/1 failed: `kubeadm init`: exit status 1\n[…]\n") || !strings.HasSuffix(got, "[ERROR CRI]: container runtime is not running") {
		t.Errorf("truncate kept %q … %q", got[:80], got[len(got)-80:])
	}
	if short := "runcmd 1/1 failed"; truncate(short, 4000) != short {
		t.Error("truncate changed a short message")
	}
}
