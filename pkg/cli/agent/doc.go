// Package agent is `kubectl fleet agent`: roll a fleet-agent release out
// to hosts in waves (upgrade), and steer a roll-out under way (approve,
// pause, resume, abort). A roll-out is an EdgeAgentRollout; the hub's
// roll-out controller moves the hosts.
package agent
