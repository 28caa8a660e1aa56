// Package hostclock is the host's wall clock as the agent reads it for
// decisions that compare against other parties' times: certificates'
// validity, when to rotate, release keys' validity.
//
// In a fleet-agent built with the faultclock build tag (the fault suite's
// build, never a release) the clock is moved by FLEET_FAULTS_CLOCK_OFFSET,
// a Go duration, so a real agent process can run as a host whose clock
// is wrong; like etcd's gofail failpoints, the hook is compiled out of
// every other build.
package hostclock
