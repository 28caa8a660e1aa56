// Command report writes the generated section of docs/RELIABILITY.md from
// the fault suite's run records (docs/reliability/*.json, written by
// `make reliability`): per fault test, its runs, the faults injected and
// orders given, the invariant violations, the time to converge (p50 and
// p99 over every phase of every run), and the replay command of every
// failing run.
package main
