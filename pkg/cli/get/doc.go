// Package get is `kubectl fleet get clusters|machines|hosts`. Tables are the
// API server's own (the CRDs' printer columns, as `kubectl get` shows them);
// -o json|yaml|name|jsonpath print the objects.
package get
