// Package edgehost reconciles EdgeHosts: it keeps each host's phase true to
// its claim and its agent's report, protects claimed or dirty hosts from
// deletion (the PersistentVolume protection pattern), and frees claims whose
// EdgeMachine is gone.
package edgehost
