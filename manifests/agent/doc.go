// Package agent embeds fleet-agent's systemd unit, so `fleet-agent install`
// and the packages ship exactly the file that is tested.
package agent
