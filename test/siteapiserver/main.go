// Command siteapiserver plays an edge cluster's API server in tests of edge
// reach: etcd and kube-apiserver (from bin/k8s) started in the network
// namespace it is run in, listening on every address of that namespace,
// with a serving certificate for the cluster's endpoint name — as kubeadm
// would issue it — so clients that reach it through the hub's tunnel
// verify TLS against that name, end to end.
//
// It writes an administrator kubeconfig whose server is the endpoint name,
// prints "ready", and runs until SIGTERM or SIGINT.
package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/edgefleet/fleet/pkg/pki"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "siteapiserver: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("siteapiserver", flag.ExitOnError)
	dir := fs.String("dir", "", "Directory for etcd data, certificates and the kubeconfig.")
	binDir := fs.String("bin-dir", "", "Directory holding etcd and kube-apiserver.")
	port := fs.Int("port", 6443, "Port the API server listens on (all addresses of this network namespace).")
	name := fs.String("name", "", "The cluster's endpoint name, put in the serving certificate and the kubeconfig.")
	advertise := fs.String("advertise-address", "127.0.0.1", "Address the API server advertises (a site without a default route has none it could guess).")
	out := fs.String("kubeconfig-out", "", "Where to write the administrator kubeconfig.")
	_ = fs.Parse(os.Args[1:])
	if *dir == "" || *binDir == "" || *name == "" || *out == "" {
		return errors.New("--dir, --bin-dir, --name and --kubeconfig-out are required")
	}

	certDir := filepath.Join(*dir, "apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("site-apiserver-ca", 24*time.Hour)
	if err != nil {
		return err
	}
	serving, err := ca.ServingCertificate([]string{*name, "localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(serving.PrivateKey)
	if err != nil {
		return err
	}
	sa, err := pki.NewCA("site-service-accounts", 24*time.Hour)
	if err != nil {
		return err
	}
	// With apiserver.crt present envtest uses these files and the CA given
	// below instead of making its own (whose names it cannot be told).
	files := map[string][]byte{
		"apiserver.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: serving.Certificate[0]}),
		"apiserver.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		"sa-signer.crt": sa.CertPEM,
		"sa-signer.key": sa.KeyPEM,
	}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(certDir, f), b, 0o600); err != nil {
			return err
		}
	}
	// Its output goes to ours, for the test's log when something fails.
	apiServer := &envtest.APIServer{CertDir: certDir, Out: os.Stderr, Err: os.Stderr}
	apiServer.SecureServing.Address = "127.0.0.1"
	apiServer.SecureServing.Port = strconv.Itoa(*port)
	apiServer.SecureServing.CA = ca.CertPEM
	// envtest checks readiness on 127.0.0.1; agents of the site reach the
	// server on the site's own address too.
	apiServer.Configure().Set("bind-address", "0.0.0.0").Set("advertise-address", *advertise)
	env := &envtest.Environment{
		BinaryAssetsDirectory: *binDir,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: filepath.Join(*dir, "etcd")},
			APIServer: apiServer,
		},
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w", err)
	}
	defer func() { _ = env.Stop() }()

	server := "https://" + net.JoinHostPort(*name, strconv.Itoa(*port))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["site"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca.CertPEM}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["site"] = &clientcmdapi.Context{Cluster: "site", AuthInfo: "admin"}
	kc.CurrentContext = "site"
	if err := clientcmd.WriteToFile(*kc, *out); err != nil {
		return err
	}
	fmt.Println("ready")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}
