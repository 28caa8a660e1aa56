// Package hostphase computes an EdgeHost's phase and whether it may be
// claimed from the host's spec, labels and its agent's report alone. The hub
// and `kubectl fleet` both judge hosts with it, so they never disagree.
package hostphase
