package kubeupgrade

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// prober checks, over the host's loopback, that the kubelet is healthy, the
// API server (on a control plane) ready, and the Node on the version and
// Ready, as the kubelet's own credentials see it.
type prober struct{ root string }

func (p *prober) probe(ctx context.Context, version, nodeName string, controlPlane bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := get(ctx, http.DefaultClient, "http://127.0.0.1:10248/healthz", nil); err != nil {
		return fmt.Errorf("the kubelet is not healthy: %w", err)
	}
	kc, err := p.kubeletClient()
	if err != nil {
		return err
	}
	defer kc.client.CloseIdleConnections()
	if controlPlane {
		// On a control plane kubeadm points kubelet.conf at the local API
		// server, by the address its certificate is for.
		if err := get(ctx, kc.client, kc.server+"/readyz", nil); err != nil {
			return fmt.Errorf("the API server is not ready: %w", err)
		}
	}
	var node struct {
		Status struct {
			NodeInfo   struct{ KubeletVersion string } `json:"nodeInfo"`
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := get(ctx, kc.client, kc.server+"/api/v1/nodes/"+nodeName, &node); err != nil {
		return fmt.Errorf("reading node %s: %w", nodeName, err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != version {
		return fmt.Errorf("node %s reports kubelet %s, not %s", nodeName, v, version)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" && c.Status == "True" {
			return nil
		}
	}
	return fmt.Errorf("node %s is not Ready", nodeName)
}

type kubeletClient struct {
	server string
	client *http.Client
}

// kubeletClient reads kubeadm's kubelet.conf: the API server's address and
// CA, and the kubelet's rotating client certificate.
// clusterVersion is the kubernetesVersion of the ClusterConfiguration in
// kube-system/kubeadm-config, which kubeadm lets nodes read.
func (p *prober) clusterVersion(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kc, err := p.kubeletClient()
	if err != nil {
		return "", err
	}
	defer kc.client.CloseIdleConnections()
	var cm struct {
		Data struct {
			ClusterConfiguration string `json:"ClusterConfiguration"`
		} `json:"data"`
	}
	if err := get(ctx, kc.client, kc.server+"/api/v1/namespaces/kube-system/configmaps/kubeadm-config", &cm); err != nil {
		return "", fmt.Errorf("reading kube-system/kubeadm-config: %w", err)
	}
	var cc struct {
		KubernetesVersion string `json:"kubernetesVersion"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data.ClusterConfiguration), &cc); err != nil || cc.KubernetesVersion == "" {
		return "", fmt.Errorf("kube-system/kubeadm-config names no kubernetesVersion (%v)", err)
	}
	return cc.KubernetesVersion, nil
}

func (p *prober) kubeletClient() (*kubeletClient, error) {
	b, err := os.ReadFile(filepath.Join(p.root, "etc/kubernetes/kubelet.conf"))
	if err != nil {
		return nil, err
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData string `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Cert string `json:"client-certificate"`
				Key  string `json:"client-key"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("reading kubelet.conf: %w", err)
	}
	if len(kc.Clusters) != 1 || len(kc.Users) != 1 {
		return nil, errors.New("kubelet.conf does not have one cluster and one user")
	}
	ca, err := base64.StdEncoding.DecodeString(kc.Clusters[0].Cluster.CAData)
	if err != nil {
		return nil, fmt.Errorf("kubelet.conf's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("kubelet.conf's CA holds no certificate")
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(p.root, kc.Users[0].User.Cert), filepath.Join(p.root, kc.Users[0].User.Key))
	if err != nil {
		return nil, fmt.Errorf("the kubelet's client certificate: %w", err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	return &kubeletClient{server: strings.TrimSuffix(kc.Clusters[0].Cluster.Server, "/"), client: &http.Client{Transport: tr}}, nil
}

func get(ctx context.Context, c *http.Client, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if into != nil {
		return json.Unmarshal(body, into)
	}
	return nil
}

// serving is the certificate the host's API server serves, as the kubelet
// reaches it.
func (p *prober) serving(ctx context.Context) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kc, err := p.kubeletClient()
	if err != nil {
		return nil, err
	}
	defer kc.client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kc.server+"/readyz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := kc.client.Do(req)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	if resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return nil, errors.New("no certificate served")
	}
	return resp.TLS.PeerCertificates[0], nil
}
