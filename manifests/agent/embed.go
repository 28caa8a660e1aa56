package agent

import _ "embed"

// Unit is manifests/agent/fleet-agent.service.
//
//go:embed fleet-agent.service
var Unit []byte

// FirstBootUnit is manifests/agent/fleet-agent-firstboot.service.
//
//go:embed fleet-agent-firstboot.service
var FirstBootUnit []byte
