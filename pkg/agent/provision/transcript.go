package provision

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
	"github.com/edgefleet/fleet/pkg/agent/hostclock"
)

// MaxTranscript bounds a transcript (agent.BootstrapTranscript,
// agent.ResetTranscript): the whole output of the last bootstrap or reset,
// each a file in StateDir that the next one replaces. They hold what the
// commands printed (join tokens among it), so only root reads them and
// the agent redacts them before they leave the host.
const MaxTranscript = 8 << 20

// TranscriptRunner is a Runner that also copies a command's whole output
// to w.
type TranscriptRunner interface {
	RunTo(ctx context.Context, c cloudconfig.Command, w io.Writer) ([]byte, error)
}

// transcript writes one bootstrap's or reset's record, bounded.
type transcript struct {
	f    *os.File
	n    int64
	full bool
}

// openTranscript starts the transcript name in StateDir afresh; nil when
// there is no StateDir or it cannot be written (the bootstrap goes on).
func (p *Provisioner) openTranscript(name string) *transcript {
	if p.opts.StateDir == "" {
		return nil
	}
	if err := os.MkdirAll(p.opts.StateDir, 0o700); err != nil {
		p.log("cannot keep the transcript: " + err.Error())
		return nil
	}
	f, err := os.OpenFile(filepath.Join(p.opts.StateDir, name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		p.log("cannot keep the transcript: " + err.Error())
		return nil
	}
	t := &transcript{f: f}
	t.note("started")
	return t
}

func (t *transcript) Write(b []byte) (int, error) {
	if t == nil || t.full {
		return len(b), nil
	}
	if room := MaxTranscript - t.n; int64(len(b)) > room {
		_, _ = t.f.Write(b[:room])
		_, _ = fmt.Fprintf(t.f, "\n[… transcript cut at %d bytes …]\n", MaxTranscript)
		t.n, t.full = MaxTranscript, true
		return len(b), nil
	}
	n, err := t.f.Write(b)
	t.n += int64(n)
	if err != nil {
		t.full = true
	}
	return len(b), nil
}

// note writes a line of the agent's own, marked apart from commands'
// output.
func (t *transcript) note(format string, args ...any) {
	_, _ = fmt.Fprintf(t, "==> %s %s\n", hostclock.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

func (t *transcript) close() {
	if t != nil {
		_ = t.f.Close()
	}
}

// copyOutput appends the whole of out, a command's output file, to w.
func copyOutput(out *os.File, w io.Writer) {
	if w == nil {
		return
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return
	}
	_, _ = io.Copy(w, out)
}
