package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // cloud auth providers in kubeconfigs
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/edgefleet/fleet/pkg/cli"
)

func main() {
	// Ctrl-C ends a watch or a wait through the context; a second one
	// kills the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() { <-ctx.Done(); stop() }()
	// client-go's klog lines (discovery retries, "Unhandled Error") would
	// surround the one error line; the API server's warnings still show,
	// once each, as kubectl shows them.
	klog.SetLogger(logr.Discard())
	rest.SetDefaultWarningHandler(rest.NewWarningWriter(os.Stderr, rest.WarningWriterOptions{Deduplicate: true}))
	cmd := cli.NewRootCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	err := cmd.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
