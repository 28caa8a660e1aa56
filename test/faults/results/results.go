package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Run is one run of one fault test under one seed.
type Run struct {
	Test string    `json:"test"`
	Seed int64     `json:"seed"`
	When time.Time `json:"when"`
	// Hosts is how many edge hosts the run had.
	Hosts int `json:"hosts"`
	// Faults is how many faults were injected; Orders how many Machines
	// were created or deleted.
	Faults int `json:"faults"`
	Orders int `json:"orders"`
	// Phases is each phase's time to converge.
	Phases []Phase `json:"phases"`
	// Violations are the invariants the run broke.
	Violations []string `json:"violations,omitempty"`
	// Passed is false for a run that broke an invariant or never
	// converged.
	Passed  bool    `json:"passed"`
	Seconds float64 `json:"seconds"`
	// Replay is the command that runs it again.
	Replay string `json:"replay"`
}

// Phase is how long after its faults (or, where they fall on the acts
// themselves, its orders) the API server read as the agents' records.
type Phase struct {
	Name            string  `json:"name"`
	ConvergeSeconds float64 `json:"convergeSeconds"`
}

// Write puts r in dir as <test>-<hosts>hosts-<seed>.json, replacing an
// earlier run of the same test, size and seed: a long form (more hosts)
// is kept beside the short one.
func Write(dir string, r Run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%dhosts-%d.json", r.Test, r.Hosts, r.Seed)), append(b, '\n'), 0o644)
}

// Read returns the runs in dir, by test, hosts and seed.
func Read(dir string) ([]Run, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Run
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var r Run
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Test != out[j].Test {
			return out[i].Test < out[j].Test
		}
		if out[i].Hosts != out[j].Hosts {
			return out[i].Hosts < out[j].Hosts
		}
		return out[i].Seed < out[j].Seed
	})
	return out, nil
}

// Soak is a long run of many simulated agents under churn (make soak).
type Soak struct {
	When     time.Time `json:"when"`
	Agents   int       `json:"agents"`
	Replicas int       `json:"replicas"`
	Minutes  float64   `json:"minutes"`
	// ChurnPerMinute is how many agents were restarted every minute;
	// ReplicaRestartMinutes how often a hub replica was.
	ChurnPerMinute        int     `json:"churnPerMinute"`
	ReplicaRestartMinutes float64 `json:"replicaRestartMinutes"`
	// HeapMeasure is what the samples' heap is: LiveHeap, or (runs that
	// predate it) "" for the heap in use, garbage included.
	HeapMeasure string `json:"heapMeasure,omitempty"`
	// Samples is one a minute, over every replica.
	Samples []SoakSample `json:"samples"`
	// FromMinute and the last sample are compared: their growth.
	FromMinute       float64 `json:"fromMinute"`
	HeapGrowth       float64 `json:"heapGrowth"`
	GoroutinesGrowth float64 `json:"goroutinesGrowth"`
	RSSGrowth        float64 `json:"rssGrowth"`
	// LeakedSessions is the sessions the replicas hold beyond the agents
	// connected, once the churn stopped; Violations what went wrong.
	LeakedSessions int `json:"leakedSessions"`
	// ContactLost is how many hosts were marked ContactLost during the
	// run though their agents were connected; nil when not counted.
	ContactLost *int     `json:"contactLost,omitempty"`
	Violations  []string `json:"violations,omitempty"`
	Command     string   `json:"command"`
}

// LiveHeap is the heap measure of soaks that force a GC on each replica
// before they sample: the live heap.
const LiveHeap = "live"

// SoakSample is the replicas' state at a minute of the soak.
type SoakSample struct {
	Minute     float64 `json:"minute"`
	RSSBytes   int64   `json:"rssBytes"`
	HeapBytes  int64   `json:"heapBytes"`
	Goroutines int     `json:"goroutines"`
	Sessions   int     `json:"sessions"`
}

// soakFile is where WriteSoak keeps a soak of n agents.
func soakFile(dir string, n int) string {
	return filepath.Join(dir, "soak", fmt.Sprintf("soak-%d.json", n))
}

// WriteSoak puts s in dir/soak/, replacing an earlier soak of as many
// agents.
func WriteSoak(dir string, s Soak) error {
	path := soakFile(dir, s.Agents)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadSoaks returns the soaks in dir/soak/, by agents, then oldest first.
func ReadSoaks(dir string) ([]Soak, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "soak"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Soak
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "soak", e.Name()))
		if err != nil {
			return nil, err
		}
		var s Soak
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Agents != out[j].Agents {
			return out[i].Agents < out[j].Agents
		}
		return out[i].When.Before(out[j].When)
	})
	return out, nil
}
