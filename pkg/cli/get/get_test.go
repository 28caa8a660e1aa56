package get

import (
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
		{"widgets", "", "", "want clusters, machines or hosts"},
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
