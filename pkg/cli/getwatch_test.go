package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// syncBuffer is a buffer a running command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHost(t *testing.T, ns, name string, labels map[string]string) *infrav1.EdgeHost {
	t.Helper()
	h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
	if err := env.Client.Create(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	return h
}

// rowsOf is the first cell of every line of a table: the names.
func rowsOf(out string) []string {
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		names = append(names, strings.Fields(l)[0])
	}
	return names
}

// get -w prints the table, then a row for each change made after the watch
// began (a host added, a host deleted), under the one header, and ends
// when its context does (Ctrl-C), without an error.
func TestGetWatch(t *testing.T) {
	ns := newNamespace(t, "watch")
	first := newHost(t, ns, "watch-a", nil)
	// The hub writes a new host's phase: let it, so that the rows counted
	// below come from the test's changes.
	eventually(t, "watch-a has its phase", func() error { return hostPhase(ns, "watch-a", infrav1.HostAvailable) })
	for _, tc := range []struct {
		args      []string
		header    bool
		a, b      string
		deletions int
	}{
		{[]string{"get", "hosts", "-n", ns, "-w"}, true, "watch-a", "watch-b", 1},
		{[]string{"get", "hosts", "-n", ns, "--watch", "-o", "name"}, false,
			"edgehost.infrastructure.cluster.x-k8s.io/watch-b", "edgehost.infrastructure.cluster.x-k8s.io/watch-c", 0},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut syncBuffer
		done := make(chan error, 1)
		go func() { done <- fleetTo(ctx, &out, &errOut, tc.args...) }()
		eventually(t, "the list is printed", func() error {
			if !strings.Contains(out.String(), tc.a) {
				return fmt.Errorf("printed %q %q", out.String(), errOut.String())
			}
			return nil
		})
		// The changes come after the list was printed: only the watch can
		// show them.
		second := newHost(t, ns, strings.TrimPrefix(tc.b, "edgehost.infrastructure.cluster.x-k8s.io/"), nil)
		if tc.deletions > 0 {
			if err := env.Client.Delete(context.Background(), first); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the changes are printed", func() error {
			o := out.String()
			if !strings.Contains(o, tc.b) || strings.Count(o, tc.a) < 1+tc.deletions {
				return fmt.Errorf("printed:\n%s", o)
			}
			return nil
		})
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v: ended with %v", tc.args, err)
		}
		o := out.String()
		if n := strings.Count(o, "NAME"); tc.header && (n != 1 || !strings.HasPrefix(o, "NAME ")) || !tc.header && n != 0 {
			t.Errorf("%v: %d headers:\n%s", tc.args, n, o)
		}
		if tc.header && !regexp.MustCompile(`(?m)^watch-b\s+\S+`).MatchString(o) {
			t.Errorf("%v: the added host's row lacks its columns:\n%s", tc.args, o)
		}
		first = second
		eventually(t, "the added host has its phase", func() error { return hostPhase(ns, second.Name, infrav1.HostAvailable) })
	}
}

// --no-headers drops the header; --sort-by orders the rows (and -o's
// objects) by a JSONPath as kubectl does — quantities by value, so 2 < 9 <
// 10 — and a path no object has, or one that is not a path, is refused in
// kubectl's words.
func TestGetNoHeadersAndSortBy(t *testing.T) {
	ns := newNamespace(t, "sortby")
	for name, rank := range map[string]string{"sort-a": "10", "sort-b": "2", "sort-c": "9"} {
		newHost(t, ns, name, map[string]string{"rank": rank})
	}
	out, _, err := fleet(t, "get", "hosts", "-n", ns, "--no-headers")
	if err != nil || strings.Contains(out, "NAME") || strings.Join(rowsOf(out), " ") != "sort-a sort-b sort-c" {
		t.Errorf("--no-headers: %v\n%s", err, out)
	}
	for _, sortBy := range []string{".metadata.labels.rank", "{.metadata.labels.rank}", "metadata.labels.rank"} {
		out, _, err = fleet(t, "get", "hosts", "-n", ns, "--sort-by", sortBy)
		if err != nil || !strings.HasPrefix(out, "NAME") || strings.Join(rowsOf(out)[1:], " ") != "sort-b sort-c sort-a" {
			t.Errorf("--sort-by %s: %v\n%s", sortBy, err, out)
		}
	}
	out, _, err = fleet(t, "get", "hosts", "-n", ns, "--sort-by", ".metadata.labels.rank", "-o", "name")
	if err != nil || strings.Join(rowsOf(out), " ") != "edgehost.infrastructure.cluster.x-k8s.io/sort-b "+
		"edgehost.infrastructure.cluster.x-k8s.io/sort-c edgehost.infrastructure.cluster.x-k8s.io/sort-a" {
		t.Errorf("--sort-by -o name: %v\n%s", err, out)
	}
	for sortBy, want := range map[string]string{
		".metadata.nope":  `couldn't find any field with path "{.metadata.nope}" in the list of objects`,
		"{.metadata.name": "unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'",
	} {
		for _, output := range []string{"", "json"} {
			out, _, err := fleet(t, "get", "hosts", "-n", ns, "--sort-by", sortBy, "-o", output)
			if err == nil || err.Error() != want || out != "" {
				t.Errorf("--sort-by %s -o %q: %v, printed %q; want %q", sortBy, output, err, out, want)
			}
		}
	}
}
