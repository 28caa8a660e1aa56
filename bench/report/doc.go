// Command report turns the scale benchmarks' results (docs/perf/*.json,
// written by the benchmarks in bench/) into docs/PERFORMANCE.md's generated
// section (tables with command, commit, date, machine, each figure against
// its target) and PNG plots (gonum/plot) next to it. `make bench` runs it
// last; run it alone with `go run ./bench/report`.
package main
