package load

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

func TestCPUByComponent(t *testing.T) {
	fn := func(id uint64, name string) *profile.Function { return &profile.Function{ID: id, Name: name} }
	reconcile := fn(1, "sigs.k8s.io/cluster-api/core/reconcilers/machineset.(*Reconciler).Reconcile")
	decode := fn(2, "encoding/json.Unmarshal")
	agent := fn(3, "github.com/edgefleet/fleet/pkg/agent.(*Agent).Run")
	gc := fn(4, "runtime.gcBgMarkWorker")
	loc := func(id uint64, f *profile.Function) *profile.Location {
		return &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	lRec, lDec, lAgent, lGC := loc(1, reconcile), loc(2, decode), loc(3, agent), loc(4, gc)
	ms := int64(time.Millisecond)
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function:   []*profile.Function{reconcile, decode, agent, gc},
		Location:   []*profile.Location{lRec, lDec, lAgent, lGC},
		Sample: []*profile.Sample{
			// Decoding called from a reconcile is the reconcile's.
			{Location: []*profile.Location{lDec, lRec}, Value: []int64{3, 30 * ms}},
			{Location: []*profile.Location{lDec, lAgent}, Value: []int64{2, 20 * ms}},
			{Location: []*profile.Location{lGC}, Value: []int64{1, 10 * ms}},
		},
	}
	path := filepath.Join(t.TempDir(), "cpu.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, total, err := CPUByComponent(path, []Component{
		{Name: "agents", Prefixes: []string{"github.com/edgefleet/fleet/pkg/agent."}},
		{Name: "MachineSet", Prefixes: []string{"sigs.k8s.io/cluster-api/core/reconcilers/machineset."}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if total != 60*time.Millisecond {
		t.Errorf("total %v, want 60ms", total)
	}
	want := []ComponentCPU{{"agents", 20 * time.Millisecond}, {"MachineSet", 30 * time.Millisecond}, {"other", 10 * time.Millisecond}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("component %d: %v, want %v", i, got[i], want[i])
		}
	}
	if _, _, err := CPUByComponent(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Error("a missing profile gave no error")
	}
}
