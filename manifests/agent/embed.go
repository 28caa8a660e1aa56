// Package agent embeds fleet-agent's systemd unit, so `fleet-agent install`
// and the packages ship exactly the file that is tested.
package agent

import _ "embed"

// Unit is manifests/agent/fleet-agent.service.
//
//go:embed fleet-agent.service
var Unit []byte
