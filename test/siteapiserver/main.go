package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
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
	caCert := fs.String("ca-cert", "", "PEM CA certificate (with --ca-key) that signs the serving certificate and every client certificate, as a kubeadm cluster's CA does; default a new one.")
	caKey := fs.String("ca-key", "", "PEM key of --ca-cert.")
	out := fs.String("kubeconfig-out", "", "Where to write the administrator kubeconfig.")
	_ = fs.Parse(os.Args[1:])
	if *dir == "" || *binDir == "" || *name == "" || *out == "" {
		return errors.New("--dir, --bin-dir, --name and --kubeconfig-out are required")
	}

	certDir := filepath.Join(*dir, "apiserver")
	ca, err := loadOrNewCA(*caCert, *caKey)
	if err != nil {
		return err
	}
	if err := writeServingFiles(certDir, ca, *name); err != nil {
		return err
	}
	// Its output goes to ours, for the test's log when something fails.
	apiServer := &envtest.APIServer{CertDir: certDir, Out: os.Stderr, Err: os.Stderr}
	apiServer.SecureServing.Address = "127.0.0.1"
	apiServer.SecureServing.Port = strconv.Itoa(*port)
	apiServer.SecureServing.CA = ca.CertPEM
	// Client certificates are the cluster CA's too: kubeconfigs that
	// Cluster API makes from that CA (KubeadmControlPlane's) are accepted.
	apiServer.SecureServing.Authn = &caAuthn{ca: ca}
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

// writeServingFiles writes the API server's serving certificate (for
// name, signed by ca) and a service-account signer into certDir. With
// apiserver.crt present envtest uses these files and the CA given to it
// instead of making its own (whose names it cannot be told).
func writeServingFiles(certDir string, ca *pki.CA, name string) error {
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	serving, err := ca.ServingCertificate([]string{name, "localhost"}, []net.IP{net.ParseIP("127.0.0.1")}, 24*time.Hour)
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
	return nil
}

func loadOrNewCA(certPath, keyPath string) (*pki.CA, error) {
	if certPath == "" && keyPath == "" {
		return pki.NewCA("site-apiserver-ca", 24*time.Hour)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	return pki.ParseCA(certPEM, keyPEM)
}

// caAuthn is envtest's client-certificate authentication with a CA of our
// choosing.
type caAuthn struct {
	ca  *pki.CA
	dir string
}

func (a *caAuthn) Configure(workDir string, args *envtest.Arguments) error {
	a.dir = workDir
	args.Set("client-ca-file", filepath.Join(workDir, "client-ca.crt"))
	return nil
}

func (a *caAuthn) Start() error {
	return os.WriteFile(filepath.Join(a.dir, "client-ca.crt"), a.ca.CertPEM, 0o600)
}

func (a *caAuthn) Stop() error { return nil }

// AddUser signs a client certificate for user with the CA.
func (a *caAuthn) AddUser(user envtest.User, base *rest.Config) (*rest.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user.Name, Organization: user.Groups},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca.Cert, key.Public(), a.ca.Key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cfg.KeyData = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return cfg, nil
}
