package load

import (
	"strings"
	"testing"
	"time"
)

func TestParseAPIServerMetrics(t *testing.T) {
	const before = `# HELP apiserver_request_total Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="cluster.x-k8s.io",resource="machines",scope="resource",subresource="",verb="POST",version="v1beta2"} 10
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="cluster.x-k8s.io",resource="machines",scope="resource",subresource="",verb="POST",version="v1beta2"} 1
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="cluster.x-k8s.io",resource="machines",scope="resource",subresource="",verb="POST",version="v1beta2"} 10
apiserver_request_duration_seconds_bucket{component="apiserver",dry_run="",group="cluster.x-k8s.io",resource="machines",scope="resource",subresource="",verb="POST",version="v1beta2",le="0.05"} 10
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
`
	after := strings.NewReplacer("} 10\n", "} 30\n", "} 1\n", "} 5\n").Replace(before)
	b, err := parseAPIServerMetrics(strings.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseAPIServerMetrics(strings.NewReader(after))
	if err != nil {
		t.Fatal(err)
	}
	post := Request{Verb: "POST", Group: "cluster.x-k8s.io", Resource: "machines"}
	d := a.Since(b)
	if d.Requests[post] != 20 {
		t.Errorf("requests since: %v, want 20", d.Requests[post])
	}
	// 4 s over 20 requests; the buckets do not count.
	if got := d.MeanLatency(post); got != 200*time.Millisecond {
		t.Errorf("mean latency %v, want 200ms", got)
	}
	if got := d.MeanLatency(Request{Verb: "GET"}); got != 0 {
		t.Errorf("an untimed request's latency: %v, want 0", got)
	}
	if d.TotalWatches() != 3 {
		t.Errorf("watches %v, want 3", d.TotalWatches())
	}
}
