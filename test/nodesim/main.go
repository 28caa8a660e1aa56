package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgefleet/fleet/test/nodesim/sim"
)

const kubeconfigPath = "/etc/fleet-sim/kubeconfig"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "kubeadm (fleet node simulator): %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &sim.Simulator{Root: "/", Out: os.Stdout}
	if len(args) > 0 && args[0] != "version" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
		if err != nil {
			return fmt.Errorf("workload cluster kubeconfig: %w", err)
		}
		if s.Client, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	}
	return s.Run(ctx, args)
}
