package reconcilers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/internal/testkit/testenv"
)

// env is the API server, Cluster API and fleet hub shared by this package's tests.
var env *testenv.Env

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	ctx := context.Background()
	var err error
	env, err = testenv.Start(ctx, testenv.Options{HubConcurrency: 8, ContactTimeout: contactTimeout, KubeadmCRDs: true})
	if err != nil {
		// Outside CI a developer without bin/k8s gets a clear skip; in CI
		// (CI=true) a suite that cannot start its API server fails.
		if errors.Is(err, testenv.ErrNoAssets) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "SKIP: %v\n", err)
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "FAIL: starting test environment: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping test environment: %v\n", err)
	}
	os.Exit(code)
}
