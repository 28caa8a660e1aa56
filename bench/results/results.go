package results

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Report is one benchmark run.
type Report struct {
	// Name is the file name without .json, e.g. "hub-idle-1000".
	Name string `json:"name"`
	// Kind groups runs of one benchmark at different sizes (e.g. "hub").
	Kind string `json:"kind"`
	// Title heads its section in docs/PERFORMANCE.md.
	Title string `json:"title"`
	// Size is the run's N (agents, machines), for plots across runs.
	Size    int     `json:"size,omitempty"`
	Command string  `json:"command"`
	Commit  string  `json:"commit"`
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`

	Figures []Figure `json:"figures"`
	Tables  []Table  `json:"tables,omitempty"`
	Series  []Series `json:"series,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// Figure is one measured value, with the target it is held against.
type Figure struct {
	Key   string  `json:"key"` // stable, for plots across runs
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Target is in words ("≤ 32 KiB at 10,000"); Limit and Below say how
	// to check it (Value ≤ Limit when Below, ≥ otherwise). No Limit: a
	// figure without a target.
	Target string   `json:"target,omitempty"`
	Limit  *float64 `json:"limit,omitempty"`
	Below  bool     `json:"below,omitempty"`
}

// Met tells whether the figure meets its target (ok false: it has none).
func (f Figure) Met() (met, ok bool) {
	if f.Limit == nil {
		return false, false
	}
	if f.Below {
		return f.Value <= *f.Limit, true
	}
	return f.Value >= *f.Limit, true
}

// Table is a free-form table (a breakdown, a histogram).
type Table struct {
	Title  string     `json:"title"`
	Header []string   `json:"header"`
	Rows   [][]string `json:"rows"`
}

// Series is a time series or a distribution to plot.
type Series struct {
	Key    string       `json:"key"` // also the PNG's name: <report>-<key>.png
	Title  string       `json:"title"`
	XLabel string       `json:"xLabel"`
	YLabel string       `json:"yLabel"`
	Lines  []Line       `json:"lines"`
	Kind   string       `json:"kind,omitempty"` // "line" (default) or "histogram"
	Values []float64    `json:"values,omitempty"`
	Marks  []Annotation `json:"marks,omitempty"`
}

// Line is one line of a plot.
type Line struct {
	Name   string       `json:"name"`
	Points [][2]float64 `json:"points"`
}

// Annotation marks a moment on a time axis (e.g. "hub killed").
type Annotation struct {
	X    float64 `json:"x"`
	Text string  `json:"text"`
}

// Machine is where the run happened.
type Machine struct {
	Cores    int    `json:"cores"`
	MemoryGi int    `json:"memoryGiB"`
	CPU      string `json:"cpu"`
	Kernel   string `json:"kernel"`
	Go       string `json:"go"`
}

// Limit makes a target limit.
func Limit(v float64) *float64 { return &v }

// New starts a report for a run happening now.
func New(name, kind, title, command string) *Report {
	return &Report{Name: name, Kind: kind, Title: title, Command: command, Commit: Commit(),
		Date: time.Now().UTC().Format("2006-01-02 15:04 MST"), Machine: ThisMachine()}
}

// Add records a figure.
func (r *Report) Add(f Figure) { r.Figures = append(r.Figures, f) }

// Figure returns the figure with key.
func (r *Report) Figure(key string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Key == key {
			return f, true
		}
	}
	return Figure{}, false
}

// Write saves the report as dir/<name>.json.
func (r *Report) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, r.Name+".json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", p, err)
	}
	return p, nil
}

// Read loads every report in dir.
func Read(dir string) ([]*Report, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []*Report
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := &Report{}
		if err := json.Unmarshal(b, r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Commit is the checked-out commit, "+" when the tree has changes.
func Commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+"
	}
	return c
}

// ThisMachine describes the machine from /proc.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if fs := strings.Fields(s.Text()); len(fs) >= 2 && fs[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(fs[1], 10, 64)
				m.MemoryGi = int((kb + 1<<19) >> 20)
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// String is the machine in one line.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores (%s), %d GiB, Linux %s, %s", m.Cores, m.CPU, m.MemoryGi, m.Kernel, m.Go)
}
