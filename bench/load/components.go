package load

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Component is a part of a program a CPU sample can be charged to: a
// sample belongs to the first component (in the order given) with a frame
// of its stack whose function name starts with one of Prefixes.
type Component struct {
	Name     string
	Prefixes []string
}

// ComponentCPU is one component's share of a CPU profile.
type ComponentCPU struct {
	Name string
	CPU  time.Duration
}

// CPUByComponent charges every sample of the CPU profile at path to a
// component, and what matches none to "other". A profile's flat top list
// cannot say this: one process here runs Cluster API's reconcilers,
// CABPK, the agents and the node simulator, and their time is spread over
// the same client-go, JSON and TLS functions.
func CPUByComponent(path string, components []Component) (out []ComponentCPU, total time.Duration, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, 0, fmt.Errorf("parsing CPU profile %s: %w", path, err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, fmt.Errorf("%s is not a CPU profile", path)
	}
	by := make([]time.Duration, len(components)+1)
	for _, s := range p.Sample {
		d := time.Duration(s.Value[idx])
		total += d
		by[componentOf(s, components)] += d
	}
	for i, c := range components {
		out = append(out, ComponentCPU{Name: c.Name, CPU: by[i]})
	}
	return append(out, ComponentCPU{Name: "other", CPU: by[len(components)]}), total, nil
}

// componentOf is the index in components of the sample's component, or
// len(components).
func componentOf(s *profile.Sample, components []Component) int {
	for i, c := range components {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				if line.Function == nil {
					continue
				}
				for _, prefix := range c.Prefixes {
					if strings.HasPrefix(line.Function.Name, prefix) {
						return i
					}
				}
			}
		}
	}
	return len(components)
}
