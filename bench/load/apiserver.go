package load

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Request is one kind of API request, as the API server counts it.
type Request struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
}

func (r Request) String() string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return r.Verb + " " + res
}

// Write tells whether the verb changes state.
func (r Request) Write() bool {
	switch r.Verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "CREATE", "UPDATE", "APPLY":
		return true
	}
	return false
}

// APIServerLoad is a reading of the API server's own request counters
// (apiserver_request_total), the time it spent answering them
// (apiserver_request_duration_seconds) and open watches
// (apiserver_longrunning_requests{verb="WATCH"}).
type APIServerLoad struct {
	Requests map[Request]float64
	// Seconds and Timed are the sum and count of the duration histogram:
	// Seconds[r]/Timed[r] is r's mean latency as the API server saw it.
	Seconds map[Request]float64
	Timed   map[Request]float64
	Watches map[Request]float64
}

// ReadAPIServerLoad scrapes the API server's /metrics.
func ReadAPIServerLoad(ctx context.Context, cfg *rest.Config) (*APIServerLoad, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("reading the API server's metrics: %s", resp.Status)
	}
	return parseAPIServerMetrics(resp.Body)
}

// parseAPIServerMetrics reads the series APIServerLoad holds from the
// API server's Prometheus text.
func parseAPIServerMetrics(r io.Reader) (*APIServerLoad, error) {
	out := &APIServerLoad{Requests: map[Request]float64{}, Seconds: map[Request]float64{}, Timed: map[Request]float64{}, Watches: map[Request]float64{}}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		var into map[Request]float64
		switch {
		case strings.HasPrefix(line, "apiserver_request_total{"):
			into = out.Requests
		case strings.HasPrefix(line, "apiserver_longrunning_requests{"):
			into = out.Watches
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_sum{"):
			into = out.Seconds
		case strings.HasPrefix(line, "apiserver_request_duration_seconds_count{"):
			into = out.Timed
		default:
			continue
		}
		lb, rb := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
		if rb < lb {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[rb+1:]), 64)
		if err != nil {
			continue
		}
		l := labels(line[lb+1 : rb])
		r := Request{Verb: l["verb"], Group: l["group"], Resource: l["resource"], Subresource: l["subresource"]}
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && r.Verb != "WATCH" {
			continue
		}
		into[r] += v
	}
	return out, s.Err()
}

// Since is what happened between before and l: request counts and
// durations minus before's; watches as they are now.
func (l *APIServerLoad) Since(before *APIServerLoad) *APIServerLoad {
	return &APIServerLoad{Requests: minus(l.Requests, before.Requests), Seconds: minus(l.Seconds, before.Seconds),
		Timed: minus(l.Timed, before.Timed), Watches: l.Watches}
}

func minus(now, before map[Request]float64) map[Request]float64 {
	out := map[Request]float64{}
	for r, v := range now {
		if d := v - before[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

// MeanLatency is r's mean time in the API server, or 0 if it was not timed.
func (l *APIServerLoad) MeanLatency(r Request) time.Duration {
	if l.Timed[r] == 0 {
		return 0
	}
	return time.Duration(l.Seconds[r] / l.Timed[r] * float64(time.Second))
}

func labels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		key := s[:eq]
		rest := s[eq+2:]
		end := strings.IndexByte(rest, '"')
		if end < 0 {
			break
		}
		out[key] = rest[:end]
		s = strings.TrimPrefix(rest[end+1:], ",")
	}
	return out
}

// TotalWatches is the number of watches open.
func (l *APIServerLoad) TotalWatches() float64 {
	var n float64
	for _, v := range l.Watches {
		n += v
	}
	return n
}

// EtcdFsync reads etcd's WAL fsync histogram from its /metrics: how many
// fsyncs and their total seconds.
func EtcdFsync(ctx context.Context, etcdURL string) (count, seconds float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(etcdURL, "/")+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("reading etcd's metrics: %w", err)
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "etcd_disk_wal_fsync_duration_seconds_count":
			count = v
		case "etcd_disk_wal_fsync_duration_seconds_sum":
			seconds = v
		}
	}
	return count, seconds, s.Err()
}
