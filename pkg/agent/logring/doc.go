// Package logring keeps the agent's recent log in memory, bounded, so the
// hub can show it (`kubectl fleet host logs`) on hosts whose journal no
// one can read from afar, and follow it as it grows.
package logring
