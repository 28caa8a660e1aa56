// Package reach owns how an edge host reaches its cluster's API endpoint
// (docs/EDGE-REACH.md): the endpoint the hub gave with the host's
// assignment, held to it until a new assignment; the block of the hosts
// file that resolves a name in fleet's own zone at the site (the rest of
// the file is never touched); and the check that a tunnel asks for that
// endpoint and nothing else.
package reach
