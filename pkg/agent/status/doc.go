// Package status is fleet-agent's status manager: it holds the host's
// latest full status (what the sync loop's workers and sources last
// reported) and sends it to the hub whenever it changes, coalescing bursts
// (each report is an API write at the hub), and again in full on every new
// session and on every resync.
package status
