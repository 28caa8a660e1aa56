package lazylog

import (
	"slices"

	"github.com/go-logr/logr"
)

// New returns a logger that writes through l's sink and hands it the pairs
// of WithValues only with a line that is written.
func New(l logr.Logger) logr.Logger {
	base := l.GetSink()
	if base == nil {
		return l
	}
	// One frame more between the caller and base: ours.
	if cd, ok := base.(logr.CallDepthLogSink); ok {
		base = cd.WithCallDepth(1)
	}
	return logr.New(&sink{base: base})
}

type sink struct {
	base logr.LogSink
	// values wait to be given to base; never appended to in place, since
	// loggers derived from one share it.
	values []any
}

var (
	_ logr.LogSink          = &sink{}
	_ logr.CallDepthLogSink = &sink{}
)

// Init does nothing: base was initialised by the logger it came from.
func (s *sink) Init(logr.RuntimeInfo) {}

func (s *sink) Enabled(level int) bool { return s.base.Enabled(level) }

func (s *sink) Info(level int, msg string, keysAndValues ...any) {
	s.withValues().Info(level, msg, keysAndValues...)
}

func (s *sink) Error(err error, msg string, keysAndValues ...any) {
	s.withValues().Error(err, msg, keysAndValues...)
}

func (s *sink) WithValues(keysAndValues ...any) logr.LogSink {
	return &sink{base: s.base, values: slices.Concat(s.values, keysAndValues)}
}

// WithName hands base the pairs so far first, so that they stay before
// the name as they were added.
func (s *sink) WithName(name string) logr.LogSink {
	return &sink{base: s.withValues().WithName(name)}
}

func (s *sink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.base.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &sink{base: cd.WithCallDepth(depth), values: s.values}
}

func (s *sink) withValues() logr.LogSink {
	if len(s.values) == 0 {
		return s.base
	}
	return s.base.WithValues(s.values...)
}
