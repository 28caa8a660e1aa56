package scale

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"workers to 0", Options{Name: "shop", WorkerMachines: ptr.To[int32](0)}, ""},
		{"control plane to 3", Options{Name: "shop", ControlPlaneMachines: ptr.To[int32](3)}, ""},
		{"nothing to scale", Options{Name: "shop"}, "say what to scale"},
		{"negative workers", Options{Name: "shop", WorkerMachines: ptr.To[int32](-1)}, "must not be negative"},
		{"even control plane", Options{Name: "shop", ControlPlaneMachines: ptr.To[int32](2)}, "odd number"},
		{"bad name", Options{Name: "Shop_1", WorkerMachines: ptr.To[int32](1)}, `invalid cluster name "Shop_1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOptionalInt32Flag(t *testing.T) {
	var p *int32
	v := optionalInt32{&p}
	if v.String() != "" || p != nil {
		t.Fatal("unset flag has a value")
	}
	if err := v.Set("0"); err != nil || p == nil || *p != 0 || v.String() != "0" {
		t.Fatalf("Set(0): %v %v", err, p)
	}
	if err := v.Set("x"); err == nil {
		t.Fatal("Set(x) succeeded")
	}
}
