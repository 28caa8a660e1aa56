// Package results is what a scale benchmark records: its figures against
// their targets, tables, time series for plots, and where and how it ran
// (command, commit, date, machine). Benchmarks write one JSON file per run
// into docs/perf; bench/report turns them into the tables and PNG plots of
// docs/PERFORMANCE.md, so no figure there is typed by hand.
package results
