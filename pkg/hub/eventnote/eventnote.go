package eventnote

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxLength is the events API's limit on a note, in bytes.
const MaxLength = 1024

// elision stands where a shortened note lost its middle.
const elision = "\n[…]\n"

// maxHead bounds the first line kept, so the end always has room.
const maxHead = 320

// Recorder wraps r so that every note it records fits the limit.
func Recorder(r events.EventRecorder) events.EventRecorder { return recorder{r} }

type recorder struct{ r events.EventRecorder }

func (r recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.r.Eventf(regarding, related, eventtype, reason, action, "%s", Shorten(fmt.Sprintf(note, args...)))
}

// Shorten returns s when it fits MaxLength; otherwise its first line (which
// says what failed) and as much of its end (where a command's output says
// why) as fits, never splitting a character.
func Shorten(s string) string {
	if len(s) <= MaxLength {
		return s
	}
	head, _, _ := strings.Cut(s, "\n")
	head = prefix(head, maxHead)
	room := MaxLength - len(head) - len(elision)
	tail := s[len(s)-room:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	// Whole lines read better, when a line break is near.
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < room/4 {
		tail = tail[i+1:]
	}
	return head + elision + tail
}

// prefix is s cut to at most n bytes on a character boundary.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
