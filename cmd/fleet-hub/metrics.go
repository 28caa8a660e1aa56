package main

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
)

// authnzFilter protects /metrics with the API server's TokenReview and
// SubjectAccessReview, as kubebuilder's scaffold does.
var authnzFilter = filters.WithAuthenticationAndAuthorization

func disableHTTP2(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
