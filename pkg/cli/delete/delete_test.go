package delete

import (
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	if err := (&Options{Name: "shop", Wait: true, Timeout: time.Minute}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&Options{Name: "Bad_Name"}).Validate(); err == nil || !strings.Contains(err.Error(), `invalid cluster name "Bad_Name"`) {
		t.Errorf("bad name: %v", err)
	}
	if err := (&Options{Name: "shop", Wait: true}).Validate(); err == nil || !strings.Contains(err.Error(), "--timeout 0s") {
		t.Errorf("--wait --timeout 0: %v", err)
	}
}
