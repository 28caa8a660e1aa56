// Command coredns is CoreDNS v1.13.1, the version kubeadm v1.35 lists, with
// only the plugins kubeadm's Corefile uses (and log), for the v1.35 image of
// the real-node test hosts (see hack/tools/k8s/cmd/coredns).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives are the linked plugins in the order of CoreDNS's own
// dnsserver.Directives, which is the order a query passes through them.
var directives = []string{
	"reload", "ready", "health", "prometheus", "errors", "log",
	"loadbalance", "cache", "kubernetes", "loop", "forward",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
