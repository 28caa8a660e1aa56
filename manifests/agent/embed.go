package agent

import _ "embed"

// Unit is manifests/agent/fleet-agent.service.
//
//go:embed fleet-agent.service
var Unit []byte
