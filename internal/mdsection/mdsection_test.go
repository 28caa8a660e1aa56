package mdsection

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	beginMarker = "<!-- BEGIN GENERATED -->"
	endMarker   = "<!-- END GENERATED -->"
)

// Only the generated section changes; a damaged one is refused and the
// file left as it was.
func TestSpliceReplacesOnlyTheGeneratedSection(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "PERF.md")
	if err := os.WriteFile(doc, []byte("# Perf\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(body string) []byte { return []byte(beginMarker + "\n" + body + "\n" + endMarker + "\n") }
	if err := Splice(doc, beginMarker, endMarker, gen("first")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	if err := os.WriteFile(doc, append(b, []byte("\n## after\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Splice(doc, beginMarker, endMarker, gen("second")); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(doc)
	got := string(b)
	for _, want := range []string{"hand-written", "second", "## after"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q missing from:\n%s", want, got)
		}
	}
	if strings.Contains(got, "first") || strings.Count(got, beginMarker) != 1 {
		t.Errorf("the old section was not replaced:\n%s", got)
	}
	// A section whose end marker is the file's last byte (no newline).
	if err := os.WriteFile(doc, []byte("x\n"+beginMarker+"\nold\n"+endMarker), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Splice(doc, beginMarker, endMarker, gen("new")); err != nil {
		t.Fatal(err)
	}
	// Markers out of order: refused, file untouched.
	bad := "x\n" + endMarker + "\n" + beginMarker + "\n"
	if err := os.WriteFile(doc, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Splice(doc, beginMarker, endMarker, gen("new")); err == nil {
		t.Error("a damaged section was accepted")
	}
	if b, _ := os.ReadFile(doc); string(b) != bad {
		t.Error("a damaged document was changed")
	}
}
