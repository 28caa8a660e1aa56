package main

import "testing"

func TestHubPort(t *testing.T) {
	for in, want := range map[string]uint16{
		"https://hub.example.com:7443": 7443,
		"https://hub.example.com":      443,
		"https://[::1]:8443/":          8443,
		"https://hub:99999":            0,
		"::":                           0,
	} {
		if got := hubPort(in); got != want {
			t.Errorf("hubPort(%q) = %d, want %d", in, got, want)
		}
	}
}
