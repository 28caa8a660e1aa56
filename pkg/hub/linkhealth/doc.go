// Package linkhealth judges the link health agents report (status.link of
// an EdgeHost) against the hub's thresholds: the LinkDegraded condition.
// hoststatus, the one writer of the condition, sets it with every
// connectivity or report write, and uses the same verdict to decide when a
// new report is worth an API write at all.
package linkhealth
