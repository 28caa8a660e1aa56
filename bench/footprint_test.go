package bench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/edgefleet/fleet/bench/results"
)

var footprintIdle = flag.Duration("footprint-idle", 2*time.Minute, "How long BenchmarkAgentFootprint lets the agent sit connected and idle.")

var (
	binaryRE = regexp.MustCompile(`binary: .*: (\d+) bytes`)
	rssRE    = regexp.MustCompile(`idle RSS after (\d+) s connected: (\d+) kB \(VmHWM (\d+) kB\)`)
	cpuRE    = regexp.MustCompile(`idle CPU over (\d+) s: ([0-9.]+) s of CPU = ([0-9.]+) % of one core`)
)

// BenchmarkAgentFootprint measures the real, stripped fleet-agent binary
// connected to a local hub (hack/agent-footprint.sh: fleet-hub dev, a
// token, one agent with its link probe): binary size, idle RSS, idle CPU.
// It needs root (the link probe's eBPF).
func BenchmarkAgentFootprint(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("BenchmarkAgentFootprint needs root (the agent's link probe loads eBPF programs): not measured")
	}
	secs := int(footprintIdle.Seconds())
	for range b.N {
		cmd := exec.Command("hack/agent-footprint.sh", strconv.Itoa(secs))
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("hack/agent-footprint.sh: %v\n%s", err, out)
		}
		bin, rss, cpu := binaryRE.FindSubmatch(out), rssRE.FindSubmatch(out), cpuRE.FindSubmatch(out)
		if bin == nil || rss == nil || cpu == nil {
			b.Fatalf("unexpected output of hack/agent-footprint.sh:\n%s", out)
		}
		num := func(s []byte) float64 { v, _ := strconv.ParseFloat(string(s), 64); return v }
		rep := results.New("agent-footprint", "agent", "The agent's footprint",
			fmt.Sprintf("go test ./bench -run '^$' -bench AgentFootprint -benchtime 1x -args -footprint-idle=%s (as root; runs hack/agent-footprint.sh %d)", *footprintIdle, secs))
		rep.Add(results.Figure{Key: "binary-mb", Name: "fleet-agent binary (CGO_ENABLED=0, -trimpath -ldflags '-s -w', linux/amd64)", Value: num(bin[1]) / 1e6, Unit: "MB"})
		rep.Add(results.Figure{Key: "idle-rss-mib", Name: fmt.Sprintf("idle RSS, %s s after connecting, link probe attached", rss[1]), Value: num(rss[2]) / 1024, Unit: "MiB",
			Target: "≤ 20 MiB", Limit: results.Limit(20), Below: true})
		rep.Add(results.Figure{Key: "peak-rss-mib", Name: "peak RSS (VmHWM)", Value: num(rss[3]) / 1024, Unit: "MiB"})
		rep.Add(results.Figure{Key: "idle-cpu-pct", Name: fmt.Sprintf("idle CPU over %s s (keep-alive pings, the loop tick, link windows)", cpu[1]), Value: num(cpu[3]), Unit: "% of one core"})
		rep.Notes = append(rep.Notes, "Output of the run:\n\n```\n"+string(out)+"```")
		if _, err := rep.Write(*resultsDir); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(num(rss[2])/1024, "MiB-idle-RSS")
	}
}
