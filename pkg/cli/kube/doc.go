// Package kube turns kubectl's connection flags into a client for the hub
// cluster, with errors a person can act on. It stands on client-go's
// clientcmd and dynamic client and a scheme of the few kinds the plugin
// uses, not on controller-runtime's client or cli-runtime's
// genericclioptions: those link every built-in API group, discovery's
// OpenAPI models and kustomize, which would double the plugin's size
// (docs/PERFORMANCE.md, "Binary sizes: kubectl fleet").
package kube
