package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/internal/version"
	"github.com/edgefleet/fleet/pkg/hub/lazylog"
)

// usageError is a mistake in the command line: it exits with status 2, as
// the standard flag package does, where a failure to run exits with 1.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func main() {
	cmd, err := newRootCommand().ExecuteC()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.CommandPath(), err)
	if errors.As(err, new(usageError)) {
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		os.Exit(2)
	}
	os.Exit(1)
}

// newRootCommand is fleet-hub: by default the hub against a management
// cluster, with `dev` and `version` beside it.
func newRootCommand() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "fleet-hub",
		Short: "Run fleet's Cluster API infrastructure provider for edge machines",
		Long: "fleet-hub runs fleet's Cluster API infrastructure provider for edge machines: the reconcilers,\n" +
			"the agent gateway that edge agents dial, and the edge-reach proxy.\n\n" +
			"It uses the kubeconfig of --kubeconfig, $KUBECONFIG, the in-cluster service account, or ~/.kube/config,\n" +
			"in that order. `fleet-hub dev` runs a local management cluster in this process instead (try-out and demo).",
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A daemon's shell completion would serve no one.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.showVersion {
				fmt.Fprintln(cmd.OutOrStdout(), version.Version)
				return nil
			}
			return runHub(cmd, o)
		},
	}
	o.addFlags(cmd.Flags())
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(newDevCommand(), newVersionCommand())
	return cmd
}

// runHub validates o, sets up logging, the API client and the garbage
// collector, and serves until a signal ends the process.
func runHub(_ *cobra.Command, o options) error {
	if err := o.validate(); err != nil {
		return usageError{err}
	}
	ctrl.SetLogger(lazylog.New(zap.New(zap.UseFlagOptions(&o.zap))))
	klog.SetLogger(ctrl.Log)
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.manager.kubeAPIQPS), o.manager.kubeAPIBurst
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.manager.gcPercent)
	}
	return run(ctrl.SetupSignalHandler(), cfg, o)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version (as --version does)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version.Version)
			return nil
		},
	}
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}
