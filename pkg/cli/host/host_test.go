package host

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	if err := (&Options{Action: Cordon, Names: []string{"kiosk-1", "kiosk-2.store"}}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := (&Options{Action: Approve, Names: []string{"kiosk-1", "Kiosk_2", "-x"}}).Validate()
	if err == nil || !strings.Contains(err.Error(), `invalid host name "Kiosk_2"`) || !strings.Contains(err.Error(), `invalid host name "-x"`) ||
		strings.Contains(err.Error(), "kiosk-1") {
		t.Errorf("bad names: %v", err)
	}
	if err := (&Options{Action: "drain", Names: []string{"kiosk-1"}}).Validate(); err == nil || !strings.Contains(err.Error(), "unknown host action") {
		t.Errorf("unknown action: %v", err)
	}
}
