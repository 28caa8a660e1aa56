package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgefleet/fleet/pkg/hub/embedded"
	"github.com/edgefleet/fleet/pkg/hub/lazylog"
)

// newDevCommand is `fleet-hub dev`: a whole management cluster in this
// process.
func newDevCommand() *cobra.Command {
	o := embedded.Options{Progress: os.Stdout}
	var zopts zap.Options
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local management cluster in this process (try-out and demo)",
		Long: "fleet-hub dev runs a local management cluster in one process: etcd and kube-apiserver\n" +
			"(from --bin-dir, built by `make k8s`), the Cluster API core, kubeadm bootstrap and kubeadm\n" +
			"control-plane reconcilers, and the fleet hub with its agent gateway and edge-reach proxy, through\n" +
			"which Cluster API reaches edge clusters behind NAT. The fleet is kept in --data-dir between runs;\n" +
			"Ctrl-C stops everything.",
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error { return runDev(o, zopts) },
	}
	addDevFlags(cmd.Flags(), &o)
	addZapFlags(cmd.Flags(), &zopts)
	return cmd
}

func addDevFlags(fs *pflag.FlagSet, o *embedded.Options) {
	fs.StringVar(&o.DataDir, "data-dir", ".fleet", "Where the fleet is kept (etcd data, kubeconfig, hub.log).")
	fs.BoolVar(&o.Reset, "reset", false, "Start from an empty fleet (deletes the data in --data-dir).")
	fs.StringVar(&o.BinDir, "bin-dir", defaultBinDir(), "Directory with kube-apiserver and etcd.")
	fs.StringVar(&o.GatewayAddr, "gateway-bind-address", "127.0.0.1:7443", "Address the agent gateway listens on.")
	fs.StringVar(&o.AdvertiseURL, "gateway-advertise-url", "", "URL agents are told to dial (default https://<gateway-bind-address>).")
	fs.IPSliceVar(&o.GatewayIPs, "gateway-ips", nil, "Comma-separated further IP addresses agents reach the gateway by, such as this machine's LAN address or a NAT router's (put in its serving certificate).")
	fs.StringSliceVar(&o.GatewayDNSNames, "gateway-dns-names", nil, "Comma-separated further DNS names agents reach the gateway by (put in its serving certificate).")
	fs.StringVar(&o.ProxyAddr, "proxy-bind-address", "127.0.0.1:7444", "Address of the edge-reach CONNECT proxy through which Cluster API and `kubectl fleet kubeconfig` reach edge clusters via their agents; \"0\" turns edge reach off.")
	fs.StringVar(&o.ProxyAdvertiseURL, "proxy-advertise-url", "", "URL (http://host:port) at which Cluster API and kubeconfigs reach the edge-reach proxy (default http://<proxy-bind-address>).")
	fs.StringVar(&o.HubNamespace, "hub-namespace", "fleet-system", "Namespace of the hub CA and enrollment tokens.")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", "0", "Address of the hub's Prometheus metrics (plain HTTP); \"0\" turns them off.")
}

// runDev logs to hub.log in the data directory, so that the terminal
// shows only the progress lines, and runs the embedded hub until a signal.
func runDev(o embedded.Options, zopts zap.Options) error {
	logFile, err := embedded.LogFile(o.DataDir)
	if err != nil {
		return fmt.Errorf("opening the log: %w", err)
	}
	defer logFile.Close()
	zopts.DestWriter = logFile
	o.Logger = lazylog.New(zap.New(zap.UseFlagOptions(&zopts)))
	ctrl.SetLogger(o.Logger)
	klog.SetLogger(o.Logger)
	fmt.Printf("logs: %s\n", logFile.Name())
	return embedded.Run(ctrl.SetupSignalHandler(), o)
}

// defaultBinDir is $KUBEBUILDER_ASSETS, or bin/k8s next to this binary
// (bin/fleet-hub in a checkout), or ./bin/k8s.
func defaultBinDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Join(filepath.Dir(exe), "k8s")
		if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err == nil {
			return d
		}
	}
	return filepath.Join("bin", "k8s")
}
