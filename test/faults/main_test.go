package faults

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
)

var (
	seedFlag    = flag.Int64("faults.seed", 0, "seed of the fault schedule (0: a new one, printed)")
	roundsFlag  = flag.Int("faults.rounds", 3, "faults per phase of a run")
	hostsFlag   = flag.Int("faults.hosts", 0, "hosts in TestHubKills and TestReplicaFailover (0: each its short form, 8 and 4; the long form: 30)")
	resultsFlag = flag.String("faults.results", "", "directory to write each run's outcome to, as JSON (make reliability; empty: none)")
)

// hosts is how many hosts a run of a test that scales has: -faults.hosts,
// or def, the test's short form.
func hosts(def int) int {
	if *hostsFlag > 0 {
		return *hostsFlag
	}
	return def
}

// hub is the management cluster (API server, etcd, Cluster API); workload
// is the API server the simulated nodes join.
var hub, workload *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL: the fault suite needs root (network namespaces, sandboxed agents); CI runs as root")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP: the fault suite needs root (network namespaces, sandboxed agents)")
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	var err error
	if hub, err = testenv.Start(context.Background(), testenv.Options{KubeadmBootstrap: true, NoHub: true}); err == nil {
		workload, err = testenv.Start(context.Background(), testenv.Options{APIServerOnly: true})
	}
	if err != nil {
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: starting the test environment: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = workload.Stop()
	_ = hub.Stop()
	os.Exit(code)
}
