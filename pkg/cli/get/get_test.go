package get

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		kind, selector, output string
		want                   string
	}{
		{"hosts", "site in (a,b)", "wide", ""},
		{"EdgeHost", "", "", ""},
		{"machine", "!spare", "json", ""},
		{"clusters", "", "name", ""},
		{"widgets", "", "", "want clusters, machines, hosts, rollouts or releases"},
		{"hosts", "site in (a", "", `invalid --selector "site in (a"`},
		{"hosts", "", "table", `unable to match a printer suitable for the output format "table"`},
	} {
		o := NewOptions(nil, genericiooptions.NewTestIOStreamsDiscard())
		o.kindArg, o.Selector, o.format = tc.kind, tc.selector, tc.output
		o.PrintFlags.OutputFormat = &tc.output
		err := o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("get %s -l %q -o %q: Validate() = %v, want %q", tc.kind, tc.selector, tc.output, err, tc.want)
		}
	}
}

// --sort-by's order: objects without the field first, numbers and
// quantities by value, times (RFC 3339 text) in time order, false before
// true; objects with equal values keep their order.
func TestSorter(t *testing.T) {
	s, err := newSorter("v")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		values []any
		want   string
	}{
		{[]any{int64(10), nil, float64(2.5), int64(9)}, "1 2 3 0"},
		{[]any{"1Gi", "100Mi", "2"}, "2 1 0"},
		{[]any{"2026-12-03T10:00:00Z", "2026-12-03T09:00:00Z"}, "1 0"},
		{[]any{true, false, true}, "1 0 2"},
		// Not all quantities: every string by text, so the order is one.
		{[]any{"10", "1a", "9"}, "0 1 2"},
	} {
		objs := make([]map[string]any, len(tc.values))
		order := make([]string, len(tc.values))
		for i, v := range tc.values {
			objs[i] = map[string]any{"v": v, "i": fmt.Sprint(i)}
			if v == nil {
				delete(objs[i], "v")
			}
		}
		err := s.sort(len(objs), func(i int) map[string]any { return objs[i] }, func(i, j int) { objs[i], objs[j] = objs[j], objs[i] })
		for i := range objs {
			order[i] = objs[i]["i"].(string)
		}
		if err != nil || strings.Join(order, " ") != tc.want {
			t.Errorf("sorting %v: %v, order %v, want %s", tc.values, err, order, tc.want)
		}
	}
	if _, err := newSorter("{.a[}"); err == nil || !strings.HasPrefix(err.Error(), "sorting error: ") {
		t.Errorf("bad JSONPath: %v", err)
	}
}
