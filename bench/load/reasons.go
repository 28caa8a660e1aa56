package load

import (
	"regexp"
	"sort"
	"sync"
)

// Reasons counts why the agents' sessions ended, from their own log line
// ("Disconnected from hub, retrying"): in a crowd, whether they were
// turned away (busy), timed out dialling, or lost sessions they had (a
// ping unanswered) tells where the time went. Addresses and numbers are
// blanked so that alike reasons count together.
type Reasons struct {
	mu sync.Mutex
	n  map[string]int
}

// Count is one reason and how many times agents gave it.
type Count struct {
	Reason string
	N      int
}

// Snapshot returns the counts so far.
func (r *Reasons) Snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.n))
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

// Since returns the counts added after before (a Snapshot), most frequent
// first.
func (r *Reasons) Since(before map[string]int) []Count {
	var out []Count
	for k, v := range r.Snapshot() {
		if d := v - before[k]; d > 0 {
			out = append(out, Count{Reason: k, N: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].N != out[j].N {
			return out[i].N > out[j].N
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

var (
	addrPattern   = regexp.MustCompile(`\[?[0-9a-f:.]*[0-9]\]?:[0-9]+`)
	numberPattern = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
)

func (r *Reasons) add(reason string) {
	reason = numberPattern.ReplaceAllString(addrPattern.ReplaceAllString(reason, "ADDR"), "N")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[reason]++
}
