package eventnote

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestShortenKeepsTheFirstLineAndTheEnd(t *testing.T) {
	var b strings.Builder
	b.WriteString("Agent on EdgeHost h failed the bootstrap at runcmd 1/1: exit status 1\n")
	for i := range 200 {
		b.WriteString(strings.Repeat("é", i%7) + " [preflight] a line of kubeadm's output\n")
	}
	b.WriteString("error: error execution phase preflight: [ERROR CRI]: container runtime is not running")
	got := Shorten(b.String())
	if len(got) > MaxLength {
		t.Fatalf("%d bytes, want at most %d", len(got), MaxLength)
	}
	if !utf8.ValidString(got) {
		t.Errorf("a character was split: %q", got)
	}
	if !strings.HasPrefix(got, "Agent on EdgeHost h failed the bootstrap at runcmd 1/1: exit status 1\n[…]\n") {
		t.Errorf("the first line is not kept: %q", got[:120])
	}
	if !strings.HasSuffix(got, "[ERROR CRI]: container runtime is not running") {
		t.Errorf("the end is not kept: %q", got[len(got)-120:])
	}
}

func TestShortenLeavesAShortNote(t *testing.T) {
	for _, s := range []string{"", "Host phase changed from Available to Provisioning", strings.Repeat("x", MaxLength)} {
		if got := Shorten(s); got != s {
			t.Errorf("Shorten(%d bytes) changed it", len(s))
		}
	}
}

func TestShortenALongFirstLine(t *testing.T) {
	s := strings.Repeat("€", 2000)
	got := Shorten(s)
	if len(got) > MaxLength || !utf8.ValidString(got) || !strings.Contains(got, "[…]") {
		t.Errorf("%d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
}

type fake struct{ notes []string }

func (f *fake) Eventf(_, _ runtime.Object, _, _, _, note string, args ...interface{}) {
	if note != "%s" || len(args) != 1 {
		panic("the recorder must pass the note as an argument, not as a format")
	}
	f.notes = append(f.notes, args[0].(string))
}

func TestRecorderFormatsThenShortens(t *testing.T) {
	f := &fake{}
	r := Recorder(f)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	r.Eventf(obj, nil, corev1.EventTypeNormal, "Reason", "Action", "%d%% done: %s", 50, "half")
	r.Eventf(obj, nil, corev1.EventTypeWarning, "Reason", "Action", "%s", strings.Repeat("line\n", 1000))
	if len(f.notes) != 2 || f.notes[0] != "50% done: half" || len(f.notes[1]) > MaxLength {
		t.Errorf("notes: %q", f.notes)
	}
}

// JSON sends a stray byte as a three-byte U+FFFD: a note of such bytes
// that fits by length would not fit the API.
func TestShortenMendsInvalidUTF8(t *testing.T) {
	s := strings.Repeat("ok \xff", 256)
	got := Shorten(s)
	if !utf8.ValidString(got) || len(got) > MaxLength {
		t.Errorf("%d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}

// A tail that starts on a line's first byte keeps that line.
func TestShortenKeepsALineThatStartsTheTail(t *testing.T) {
	head, last := "head", "error: the last line"
	room := MaxLength - len(head) - len(elision)
	first := strings.Repeat("y", 10) + "\n"
	tail := first + strings.Repeat("z", room-len(first)-len(last)-1) + "\n" + last
	got := Shorten(head + "\n" + strings.Repeat("x", 2000) + "\n" + tail)
	if got != head+elision+tail {
		t.Errorf("got %q…, want the whole tail after the elision", got[:40])
	}
}
