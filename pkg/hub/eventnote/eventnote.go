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
	// The API counts the note as JSON sends it, where a stray byte becomes
	// a three-byte U+FFFD.
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= MaxLength {
		return s
	}
	head, _, _ := strings.Cut(s, "\n")
	head = prefix(head, maxHead)
	room := MaxLength - len(head) - len(elision)
	start := len(s) - room
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	// Whole lines read better, when a line break is near.
	if i := strings.IndexByte(s[start-1:], '\n'); i >= 0 && i < room/4 {
		start += i
	}
	tail := s[start:]
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
