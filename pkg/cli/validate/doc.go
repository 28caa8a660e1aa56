// Package validate checks what a user typed before `kubectl fleet` sends
// anything: resource names by the rule their kind has, label selectors in
// kubectl's -l syntax and labels as k=v pairs. Each failure is one line that
// names the input, as kubectl's own errors do.
package validate
