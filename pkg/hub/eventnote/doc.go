// Package eventnote keeps an Event's note within the 1,024 bytes the events
// API accepts: the API server refuses a longer note and the Event is lost.
// A failed bootstrap's note, the kubeadm output the agent reported, is
// often longer.
package eventnote
