package validate

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		check   func(string) error
		value   string
		wantErr string
	}{
		{"new cluster", NewClusterName, "store-17", ""},
		{"new cluster with capitals and _", NewClusterName, "Bad_Name", `invalid cluster name "Bad_Name": a lowercase RFC 1123 label must consist of`},
		{"new cluster with a dot", NewClusterName, "a.b", `invalid cluster name "a.b": must not contain dots`},
		{"new cluster too long", NewClusterName, strings.Repeat("a", 64), "must be no more than 63"},
		{"existing cluster with a dot", ClusterName, "a.b", ""},
		{"existing cluster not a label value", ClusterName, strings.Repeat("a", 64), "must be no more than 63"},
		{"existing cluster", ClusterName, "Bad_Name", `invalid cluster name "Bad_Name"`},
		{"host", HostName, "store-17a.example", ""},
		{"bad host", HostName, "Kiosk_1", `invalid host name "Kiosk_1"`},
		{"namespace", func(s string) error { return Namespace("--hub-namespace", s) }, "fleet-system", ""},
		{"bad namespace", func(s string) error { return Namespace("--hub-namespace", s) }, "Fleet", `invalid --hub-namespace "Fleet"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check(tc.value)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("%q: %v", tc.value, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: got %v, want one line with %q", tc.value, err, tc.wantErr)
			}
		})
	}
}

func TestLabelSelector(t *testing.T) {
	for _, tc := range []struct {
		name      string
		selectors []string
		want      *metav1.LabelSelector
		wantErr   string
	}{
		{"none", nil, nil, ""},
		{"empty", []string{""}, nil, ""},
		{"pairs", []string{"site=a,rack=r1"}, &metav1.LabelSelector{MatchLabels: map[string]string{"site": "a", "rack": "r1"}}, ""},
		{"set, not split at its comma", []string{"site in (a,b)"}, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "site", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}, ""},
		{"every operator", []string{"a!=1,b notin (x),c,!d"}, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "a", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"1"}},
			{Key: "b", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}},
			{Key: "c", Operator: metav1.LabelSelectorOpExists},
			{Key: "d", Operator: metav1.LabelSelectorOpDoesNotExist}}}, ""},
		{"several all match; the last = wins", []string{"site=a,zone=z", "site=b", "!spare"}, &metav1.LabelSelector{
			MatchLabels:      map[string]string{"site": "b", "zone": "z"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "spare", Operator: metav1.LabelSelectorOpDoesNotExist}}}, ""},
		{"a key twice", []string{"site=a,site=b"}, nil, "site is given twice"},
		{"unbalanced", []string{"site in (a,b"}, nil, `invalid --host-selector "site in (a,b"`},
		{"bad value", []string{"site=a b"}, nil, `invalid --host-selector`},
		{"greater-than has no LabelSelector form", []string{"cpus>4"}, nil, `invalid --host-selector "cpus>4": cpus>4: a host selector cannot compare numbers`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LabelSelector("--host-selector", tc.selectors...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	got, err := Labels("--labels", []string{"site=store-17", "topology.kubernetes.io/zone=eu-1", "empty="})
	if err != nil || !reflect.DeepEqual(got, map[string]string{"site": "store-17", "topology.kubernetes.io/zone": "eu-1", "empty": ""}) {
		t.Fatalf("Labels = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		"novalue":   "want key=value",
		"=v":        "want key=value",
		"bad key=v": `invalid --labels key "bad key"`,
		"k=bad v":   `invalid --labels value "bad v" for k`,
	} {
		if _, err := Labels("--labels", []string{in}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Labels(%q) = %v, want %q", in, err, want)
		}
	}
}
