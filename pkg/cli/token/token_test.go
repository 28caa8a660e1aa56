package token

import (
	"strings"
	"testing"
	"time"

	"github.com/edgefleet/fleet/pkg/cli/command"
)

var (
	_ command.Options = &CreateOptions{}
	_ command.Options = &ListOptions{}
	_ command.Options = &RevokeOptions{}
)

func TestValidate(t *testing.T) {
	check := func(name string, err error, want string) {
		t.Helper()
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: Validate() = %v, want %q", name, err, want)
		}
	}
	create := func(change func(*CreateOptions)) error {
		o := &CreateOptions{HubNamespace: "fleet-system", TTL: time.Hour, Usages: 1, Labels: []string{"site=store-17"}}
		change(o)
		return o.Validate()
	}
	check("create", create(func(*CreateOptions) {}), "")
	check("negative ttl", create(func(o *CreateOptions) { o.TTL = -time.Second }), "--ttl must not be negative")
	check("negative usages", create(func(o *CreateOptions) { o.Usages = -1 }), "--usages must not be negative")
	check("label without value", create(func(o *CreateOptions) { o.Labels = []string{"novalue"} }), "key=value")
	check("bad label value", create(func(o *CreateOptions) { o.Labels = []string{"site=store 17"} }), `invalid --labels value "store 17"`)
	check("reserved label", create(func(o *CreateOptions) { o.Labels = []string{"fleet.edgefleet.io/approval=approved"} }), "set by the hub")
	check("bad hub namespace", create(func(o *CreateOptions) { o.HubNamespace = "Fleet" }), `invalid --hub-namespace "Fleet"`)

	check("list", (&ListOptions{HubNamespace: "fleet-system"}).Validate(), "")
	check("list bad hub namespace", (&ListOptions{HubNamespace: ""}).Validate(), "invalid --hub-namespace")

	check("revoke", (&RevokeOptions{HubNamespace: "fleet-system", ID: "abc123"}).Validate(), "")
	check("revoke bad id", (&RevokeOptions{HubNamespace: "fleet-system", ID: "ABC"}).Validate(), `invalid token id "ABC"`)
}
