package version

import (
	"strings"
	"testing"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var _ command.Options = &Options{}

func TestValidate(t *testing.T) {
	if err := (&Options{HubNamespace: "fleet-system"}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (&Options{HubNamespace: "Fleet_System"}).Validate(); err == nil || !strings.Contains(err.Error(), `invalid --hub-namespace "Fleet_System"`) {
		t.Errorf("bad hub namespace: %v", err)
	}
	if err := (&Options{HubNamespace: "Fleet_System", ClientOnly: true}).Validate(); err != nil {
		t.Errorf("--client checks what it does not use: %v", err)
	}
}
