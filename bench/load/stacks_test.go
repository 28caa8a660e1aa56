package load

import (
	"context"
	"runtime"
	"testing"
	"time"
)

func TestStackSamplerClassifies(t *testing.T) {
	s := &StackSampler{Goroutine: "machineset.(*Reconciler).createMachines", Classes: []WaitClass{
		{Name: "rate limiter", Frames: []string{"rest.(*Request).tryThrottle"}},
		{Name: "API server", Frames: []string{"net/http."}},
	}}
	const throttled = `goroutine profile: total 40
3 @ 0x1 0x2 0x3
#	0x1	runtime.gopark+0x1	proc.go:1
#	0x2	k8s.io/client-go/rest.(*Request).tryThrottle+0x2	request.go:1
#	0x3	sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines+0x3	machineset_controller.go:1`
	const http = `2 @ 0x1 0x4 0x3
#	0x1	runtime.gopark+0x1	proc.go:1
#	0x4	net/http.(*http2clientStream).waitOnHeaders+0x4	h2_bundle.go:1
#	0x3	sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines+0x3	machineset_controller.go:1`
	const running = `1 @ 0x5 0x3
#	0x5	encoding/json.Marshal+0x5	encode.go:1
#	0x3	sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines+0x3	machineset_controller.go:1`
	const parked = `1 @ 0x1 0x6 0x3
#	0x1	runtime.gopark+0x1	proc.go:1
#	0x6	sync.(*Mutex).Lock+0x6	mutex.go:1
#	0x3	sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).createMachines+0x3	machineset_controller.go:1`
	const unrelated = `37 @ 0x1 0x7
#	0x1	runtime.gopark+0x1	proc.go:1
#	0x7	main.other+0x7	main.go:1`
	s.Add(throttled + "\n\n" + unrelated)
	s.Add(http + "\n\n" + parked)
	s.Add(running + "\n\n" + unrelated)
	s.Add(unrelated)
	counts, samples, absent := s.Result()
	if samples != 4 || absent != 1 {
		t.Errorf("samples %d absent %d, want 4 and 1", samples, absent)
	}
	// The first stack of a profile follows its header; a stack's count
	// is how many goroutines share it.
	want := map[string]int{"rate limiter": 3, "API server": 2, elsewhere: 2}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("classes %v, want %v", counts, want)
	}
}

// The sampler reads this process's real goroutine profile.
func TestStackSamplerRuns(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	go parkedForTheSampler(block)
	s := &StackSampler{Goroutine: "load.parkedForTheSampler", Classes: []WaitClass{{Name: "on the channel", Frames: []string{"load.parkedForTheSampler"}}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx, time.Millisecond); close(done) }()
	deadline := time.Now().Add(time.Minute)
	for {
		if counts, _, _ := s.Result(); counts["on the channel"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			counts, samples, absent := s.Result()
			t.Fatalf("the parked goroutine was never seen: %v in %d samples, %d without it", counts, samples, absent)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}

func parkedForTheSampler(c chan struct{}) { <-c }
