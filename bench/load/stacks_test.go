package load

import "testing"

func TestStackSamplerClassifies(t *testing.T) {
	s := &StackSampler{Goroutine: "machineset.(*Reconciler).createMachines", Classes: []WaitClass{
		{Name: "rate limiter", Frames: []string{"rest.(*Request).tryThrottle"}},
		{Name: "API server", Frames: []string{"net/http."}},
	}}
	const throttled = `goroutine 10 [select]:
golang.org/x/time/rate.(*Limiter).wait(...)
k8s.io/client-go/rest.(*Request).tryThrottle(...)
sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines(...)`
	const http = `goroutine 10 [select]:
net/http.(*http2clientStream).waitOnHeaders(...)
sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines(...)`
	const running = `goroutine 10 [running]:
encoding/json.Marshal(...)
sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines(...)`
	const unrelated = `goroutine 11 [chan receive, 3 minutes]:
main.other()`
	s.Add(throttled + "\n\n" + unrelated)
	s.Add(throttled)
	s.Add(http)
	s.Add(running + "\n\n" + unrelated)
	s.Add(unrelated)
	counts, samples, absent := s.Result()
	if samples != 5 || absent != 1 {
		t.Errorf("samples %d absent %d, want 5 and 1", samples, absent)
	}
	want := map[string]int{"rate limiter": 2, "API server": 1, "on CPU or waiting for one": 1}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("classes %v, want %v", counts, want)
	}
}
