package load

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// recentLines is how many of an agent's last log lines are kept: enough to
// see why one agent of thousands stalled, small enough for 10,000.
const recentLines = 24

// recentLog keeps an agent's last log lines, for a benchmark to show when
// that agent is the one a run waits for.
type recentLog struct {
	mu    sync.Mutex
	lines [recentLines]string
	next  int
	n     int
}

func (l *recentLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines[l.next] = line
	l.next = (l.next + 1) % recentLines
	l.n = min(l.n+1, recentLines)
}

// String is the kept lines, oldest first.
func (l *recentLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for k := range l.n {
		b.WriteString(l.lines[(l.next-l.n+k+recentLines)%recentLines])
		b.WriteByte('\n')
	}
	return b.String()
}

// agentSink keeps an agent's log lines in its recentLog and counts its
// disconnections in Reasons.
type agentSink struct {
	reasons *Reasons
	log     *recentLog
	values  []any
}

func (s agentSink) logger() logr.Logger { return logr.New(s) }

func (agentSink) Init(logr.RuntimeInfo)  {}
func (agentSink) Enabled(level int) bool { return level == 0 }

func (s agentSink) Error(err error, msg string, kv ...any) {
	s.log.add(format(msg, append([]any{"error", err}, append(s.values, kv...)...)))
}

func (s agentSink) Info(_ int, msg string, kv ...any) {
	s.log.add(format(msg, append(s.values, kv...)))
	if msg != "Disconnected from hub, retrying" {
		return
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "reason" {
			if v, ok := kv[i+1].(string); ok {
				s.reasons.add(v)
			}
		}
	}
}

func (s agentSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(append([]any(nil), s.values...), kv...)
	return s
}

func (s agentSink) WithName(string) logr.LogSink { return s }

func format(msg string, kv []any) string {
	var b strings.Builder
	b.WriteString(time.Now().Format("15:04:05.000 "))
	b.WriteString(msg)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%q", kv[i], fmt.Sprint(kv[i+1]))
	}
	return b.String()
}
