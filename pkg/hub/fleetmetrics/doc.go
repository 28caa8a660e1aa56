// Package fleetmetrics exports the state of the fleet as Prometheus gauges:
// hosts by phase and by agent connectivity, how long each lost agent has
// been gone, days until the earliest certificate expiry of each cluster,
// and Machines that MachineHealthCheck marked for remediation. A collector
// computes them from the hub's informer cache at scrape time: no API call,
// no write, nothing per agent.
package fleetmetrics
