package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgefleet/fleet/bench/results"
)

func TestSpliceReplacesOnlyTheGeneratedSection(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "PERF.md")
	if err := os.WriteFile(doc, []byte("# Perf\n\nhand-written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gen := func(body string) []byte { return []byte(beginMarker + "\n" + body + "\n" + endMarker + "\n") }
	if err := splice(doc, gen("first")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(doc)
	if err := os.WriteFile(doc, append(b, []byte("\n## after\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := splice(doc, gen("second")); err != nil {
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
	if err := splice(doc, gen("new")); err != nil {
		t.Fatal(err)
	}
	// Markers out of order: refused, file untouched.
	bad := "x\n" + endMarker + "\n" + beginMarker + "\n"
	if err := os.WriteFile(doc, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := splice(doc, gen("new")); err == nil {
		t.Error("a damaged section was accepted")
	}
	if b, _ := os.ReadFile(doc); string(b) != bad {
		t.Error("a damaged document was changed")
	}
}

func TestValueAndTargets(t *testing.T) {
	for _, c := range []struct {
		f    results.Figure
		want string
	}{
		{results.Figure{Value: 12345, Unit: "ms"}, "12,345 ms"},
		{results.Figure{Value: 115.14, Unit: "KiB"}, "115 KiB"},
		{results.Figure{Value: 42.26}, "42.3"},
		{results.Figure{Value: 0.0171, Unit: "%"}, "0.02 %"},
	} {
		if got := value(c.f); got != c.want {
			t.Errorf("value(%v) = %q, want %q", c.f.Value, got, c.want)
		}
	}
	// A target held at one size gives no verdict on a run of another.
	for _, c := range []struct {
		target string
		size   int
		want   bool
	}{
		{"≤ 30 s at 10,000", 1000, true},
		{"≤ 30 s at 10,000", 10000, false},
		{"≤ 32 KiB at 10,000 agents", 5000, true},
		{"≤ 60 s", 1000, false},
		{"≤ 30 s at 10,000", 0, false},
	} {
		if got := heldAtAnotherSize(&results.Report{Size: c.size}, results.Figure{Target: c.target}); got != c.want {
			t.Errorf("target %q, run of %d: held at another size %v, want %v", c.target, c.size, got, c.want)
		}
	}
	below := results.Figure{Value: 40, Limit: results.Limit(32), Below: true}
	if met, ok := below.Met(); !ok || met {
		t.Errorf("40 ≤ 32: met %v ok %v", met, ok)
	}
	above := results.Figure{Value: 40, Limit: results.Limit(32)}
	if met, ok := above.Met(); !ok || !met {
		t.Errorf("40 ≥ 32: met %v ok %v", met, ok)
	}
	if _, ok := (results.Figure{Value: 1}).Met(); ok {
		t.Error("a figure without a target has one")
	}
}
