package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/edgefleet/fleet/bench/results"
	"github.com/edgefleet/fleet/internal/testkit/testenv"
	"github.com/edgefleet/fleet/pkg/cli/describe"
	"github.com/edgefleet/fleet/pkg/cli/kube"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var env *testenv.Env

var etcdNoFsync = flag.Bool("etcd-no-fsync", false, "Run etcd with --unsafe-no-fsync (as on a memory disk, envtest's default for tests), so the figures do not measure this machine's disk; by default the benchmarks' etcd syncs its log as in production.")

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		// `make test` runs no benchmarks: do not start an API server for them.
		os.Exit(m.Run())
	}
	var err error
	env, err = testenv.Start(context.Background(), testenv.Options{APIServerOnly: true, KubeadmBootstrap: true, EtcdFsync: !*etcdNoFsync})
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

type counter struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// fleet writes a cluster with n worker machines, each with its EdgeMachine
// and EdgeHost.
func fleet(b *testing.B, ns string, n int) {
	b.Helper()
	ctx := context.Background()
	c := env.Client
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	lbl := map[string]string{clusterv1.ClusterNameLabel: "big"}
	must(c.Create(ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns, Labels: lbl},
		Spec: clusterv1.ClusterSpec{InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeCluster", Name: "big"}}}))
	must(c.Create(ctx, &infrav1.EdgeCluster{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns, Labels: lbl}}))
	must(c.Create(ctx, &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Name: "big-md-0", Namespace: ns, Labels: lbl},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: "big", Replicas: ptr.To(int32(n)),
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"md": "0"}},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: map[string]string{"md": "0"}},
				Spec: clusterv1.MachineSpec{ClusterName: "big", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachineTemplate", Name: "t"}}}}}))
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("big-md-0-%04d", i)
		host := fmt.Sprintf("host-%04d", i)
		must(c.Create(ctx, &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Name: host, Namespace: ns}}))
		em := &infrav1.EdgeMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbl}}
		must(c.Create(ctx, em))
		em.Status.HostRef = host
		must(c.Status().Update(ctx, em))
		must(c.Create(ctx, &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{clusterv1.ClusterNameLabel: "big", clusterv1.MachineDeploymentNameLabel: "big-md-0"}},
			Spec: clusterv1.MachineSpec{ClusterName: "big", Bootstrap: clusterv1.Bootstrap{DataSecretName: ptr.To("x")},
				ProviderID:        "edge://" + ns + "/" + host,
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "EdgeMachine", Name: name}}}))
	}
}

// BenchmarkDescribeCluster1000 times `kubectl fleet describe cluster` on a
// cluster of 1,000 machines (1,000 EdgeMachines, 1,000 EdgeHosts) against
// a real API server, and reports the API requests it makes.
var describeFleet sync.Once

func BenchmarkDescribeCluster1000(b *testing.B) {
	describeFleet.Do(func() { fleet(b, "bench-describe", 1000) })
	var n atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return counter{rt: rt, n: &n} })
	conn, err := kube.NewConnection(cfg)
	if err != nil {
		b.Fatal(err)
	}
	c := conn.Client
	b.ResetTimer()
	n.Store(0)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		tree, err := describe.Build(context.Background(), c, "bench-describe", "big", time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if got := len(tree.Children[len(tree.Children)-1].Children); got != 1000 {
			b.Fatalf("%d machines in the tree", got)
		}
	}
	took := time.Since(start)
	b.ReportMetric(float64(n.Load())/float64(b.N), "requests/op")
	if b.N < 5 {
		return // the framework's calibration runs
	}
	rep := results.New("describe-01000", "describe", "kubectl fleet describe cluster, 1,000 machines",
		"go test ./bench -run '^$' -bench DescribeCluster -benchtime 10x -count 1")
	rep.Add(results.Figure{Key: "describe-ms", Name: fmt.Sprintf("one describe of a 1,000-machine cluster (mean of %d)", b.N),
		Value: float64(took.Milliseconds()) / float64(b.N), Unit: "ms", Target: "≤ 1 s", Limit: results.Limit(1000), Below: true})
	rep.Add(results.Figure{Key: "describe-requests", Name: "API requests per describe (independent of the number of machines)", Value: float64(n.Load()) / float64(b.N)})
	rep.Notes = append(rep.Notes, "The fleet: 1 Cluster, 1 MachineDeployment, 1,000 Machines, 1,000 EdgeMachines, 1,000 EdgeHosts in one namespace. "+
		"Describe reads the Cluster, its EdgeCluster and control plane, and one list each of MachineDeployments, Machines, EdgeMachines and "+
		"EdgeHosts, then joins them in memory (`TestDescribeRequestsAreBounded` checks 3 and 40 machines make the same number of requests).")
	if _, err := rep.Write(*resultsDir); err != nil {
		b.Fatal(err)
	}
}
