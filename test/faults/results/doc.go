// Package results is the record of one fault-suite run (test/faults) as
// `make reliability` keeps it: what was injected and ordered, how long
// the fleet took to tell the truth again, and which invariants broke.
// test/faults/report turns a directory of them into docs/RELIABILITY.md.
package results
