package localkube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ErrNoBinaries means kube-apiserver or etcd is missing.
var ErrNoBinaries = errors.New("kube-apiserver/etcd binaries not found: run `make k8s` (it builds them from Go modules into bin/k8s) or pass their directory")

// Options describe a server.
type Options struct {
	// Dir holds etcd's data (Dir/etcd), the API server's certificates
	// (Dir/apiserver) and the kubeconfig (Dir/kubeconfig).
	Dir string
	// BinDir holds kube-apiserver and etcd.
	BinDir string
	// CRDs are installed (created or updated) at every start.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// Scheme is used for the CRDs' conversion settings; may be nil.
	Scheme *runtime.Scheme
	// ContextName names the kubeconfig's cluster, user and context.
	ContextName string
	// Reset deletes the server's data before starting: a new, empty server.
	Reset bool
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Kubeconfig is the path of the administrator's kubeconfig.
	Kubeconfig string

	env  *envtest.Environment
	lock *os.File
}

// Start stops what a killed earlier run left behind, then starts etcd and
// the API server, installs the CRDs and writes the kubeconfig.
func Start(o Options) (*Server, error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%w (looked in %s)", ErrNoBinaries, o.BinDir)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := private(dir); err != nil {
		return nil, err
	}
	lock, err := acquire(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, err
	}
	s := &Server{lock: lock, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	if err := StopLeftovers(dir, 10*time.Second); err != nil {
		s.release()
		return nil, err
	}
	if o.Reset {
		for _, d := range []string{"etcd", "apiserver", "kubeconfig"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				s.release()
				return nil, fmt.Errorf("resetting %s: %w", dir, err)
			}
		}
	}
	// The API server makes its serving and client CAs at each start and
	// only learns them when it writes them, so a kept certificate folder
	// would leave the client without a CA: start it empty.
	certDir := filepath.Join(dir, "apiserver")
	if err := os.RemoveAll(certDir); err != nil {
		s.release()
		return nil, err
	}
	for _, d := range []string{certDir, filepath.Join(dir, "etcd")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			s.release()
			return nil, err
		}
	}
	s.env = &envtest.Environment{
		BinaryAssetsDirectory: o.BinDir,
		ControlPlane: envtest.ControlPlane{
			Etcd:      &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")},
			APIServer: &envtest.APIServer{CertDir: certDir},
		},
		CRDs:   o.CRDs,
		Scheme: o.Scheme,
		// A first start on a slow machine installs ~20 large CRDs.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	if err := EnableAggregation(s.env.ControlPlane.APIServer, filepath.Join(certDir, "front-proxy")); err != nil {
		s.release()
		return nil, fmt.Errorf("setting up the aggregation layer: %w", err)
	}
	cfg, err := s.env.Start()
	if err != nil {
		_ = s.env.Stop()
		s.release()
		return nil, fmt.Errorf("starting etcd and kube-apiserver (data in %s): %w", dir, err)
	}
	s.Config = cfg
	name := o.ContextName
	if name == "" {
		name = "fleet-local"
	}
	if err := writeKubeconfig(s.Kubeconfig, name, cfg); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop stops the API server and etcd; the data stays.
func (s *Server) Stop() error {
	defer s.release()
	if err := s.env.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver and etcd: %w", err)
	}
	return nil
}

func (s *Server) release() {
	if s.lock != nil {
		_ = syscall.Flock(int(s.lock.Fd()), syscall.LOCK_UN)
		_ = s.lock.Close()
		s.lock = nil
	}
}

// private refuses a data directory that is a symlink, someone else's, or
// writable by others: it will hold an administrator's credentials.
func private(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir():
		return fmt.Errorf("%s is not a plain directory", dir)
	case ok && int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d, not to this user (%d): use a directory of your own", dir, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (%v): it will hold administrator credentials; chmod go-w it or use another", dir, fi.Mode().Perm())
	}
	return nil
}

// acquire takes an exclusive lock on path, so that two processes never
// run servers on one data directory.
func acquire(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		_ = f.Close()
		return nil, fmt.Errorf("%s is in use by another process (pid %s): stop it first", filepath.Dir(path), strings.TrimSpace(string(b)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}

func writeKubeconfig(path, name string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: "default"}
	kc.CurrentContext = name
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	// Write a new file then rename, so a reader never sees half a file and
	// the administrator's credentials never land in a file someone else
	// made.
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
