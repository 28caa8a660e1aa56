package lazylog

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// countingSink counts the WithValues calls that reach the real sink.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (c countingSink) WithValues(kv ...any) logr.LogSink {
	*c.withValues++
	return countingSink{LogSink: c.LogSink.WithValues(kv...), withValues: c.withValues}
}

func (c countingSink) WithName(name string) logr.LogSink {
	return countingSink{LogSink: c.LogSink.WithName(name), withValues: c.withValues}
}

func (c countingSink) WithCallDepth(depth int) logr.LogSink {
	return countingSink{LogSink: c.LogSink.(logr.CallDepthLogSink).WithCallDepth(depth), withValues: c.withValues}
}

func newLogger(t *testing.T, verbosity int) (logr.Logger, *[]string, *int) {
	t.Helper()
	var lines []string
	calls := 0
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) },
		funcr.Options{Verbosity: verbosity, LogCaller: funcr.All})
	// WithSink, not logr.New: funcr.New has initialised the sink already.
	return New(base.WithSink(countingSink{LogSink: base.GetSink(), withValues: &calls})), &lines, &calls
}

// Pairs reach the sink, in order and with the caller's line, only when a
// line is written; a logger that writes nothing never hands them over.
func TestValuesReachTheSinkOnlyWithALine(t *testing.T) {
	log, lines, calls := newLogger(t, 0)
	quiet := log.WithValues("controller", "edgehost").WithValues("name", "till-1")
	quiet.V(1).Info("Reconciling")
	if *calls != 0 || len(*lines) != 0 {
		t.Fatalf("a logger that wrote no line handed over values %d times and wrote %q", *calls, *lines)
	}

	quiet.WithName("patch").Error(errors.New("conflict"), "Patching", "attempt", 2)
	quiet.Info("Done")
	if len(*lines) != 2 {
		t.Fatalf("wrote %d lines, want 2: %q", len(*lines), *lines)
	}
	if !strings.HasPrefix((*lines)[0], "patch ") {
		t.Errorf("error line %q lacks the logger's name", (*lines)[0])
	}
	for _, want := range []string{`"controller"="edgehost" "name"="till-1" "attempt"=2`, `"error"="conflict"`} {
		if !strings.Contains((*lines)[0], want) {
			t.Errorf("error line %q lacks %s", (*lines)[0], want)
		}
	}
	if !strings.Contains((*lines)[1], `"controller"="edgehost" "name"="till-1"`) {
		t.Errorf("info line %q lacks the pairs", (*lines)[1])
	}

	// Loggers derived from one do not see each other's pairs.
	parent := log.WithValues("a", 1)
	_ = parent.WithValues("b", 2)
	*lines = nil
	parent.WithValues("c", 3).Info("x")
	if strings.Contains((*lines)[0], `"b"`) {
		t.Errorf("a sibling's pair leaked: %q", (*lines)[0])
	}
}

// Lines are attributed to the caller, not to this package.
func TestCallerIsKept(t *testing.T) {
	var line string
	log := New(funcr.New(func(prefix, args string) { line = args }, funcr.Options{LogCaller: funcr.All}))
	log.WithValues("k", "v").Info("x")
	if !strings.Contains(line, `"file"="lazylog_test.go"`) {
		t.Errorf("line %q is not attributed to its caller", line)
	}
	log.WithValues("k", "v").Error(errors.New("e"), "x")
	if !strings.Contains(line, `"file"="lazylog_test.go"`) {
		t.Errorf("error line %q is not attributed to its caller", line)
	}
}
