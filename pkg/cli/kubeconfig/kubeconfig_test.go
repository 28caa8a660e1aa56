package kubeconfig

import (
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Name: "store", ProxyURL: "http://proxy.example.com:7444"}, ""},
		{Options{Name: "store", RotateCredential: true, Timeout: time.Minute}, ""},
		{Options{Name: "Store_1"}, `invalid cluster name "Store_1"`},
		{Options{Name: "store", ProxyURL: "proxy:7444"}, "want http://host:port"},
		{Options{Name: "store", ProxyURL: "http://u:p@proxy:7444"}, "must not hold credentials"},
		{Options{Name: "store", RotateCredential: true}, "--timeout 0s"},
	} {
		err := tc.o.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.o, err, tc.want)
		}
	}
}
