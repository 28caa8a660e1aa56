package describe

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Name: "store", Output: "yaml"}, ""},
		{Options{Name: "store", Output: "wide"}, `-o "wide": want json or yaml`},
		{Options{Name: "Store_1"}, `invalid cluster name "Store_1"`},
	} {
		err := tc.o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.o, err, tc.want)
		}
	}
}
