package clusterapi

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	bootstrapadmission "sigs.k8s.io/cluster-api/bootstrap/kubeadm/webhooks/admission"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	controlplaneadmission "sigs.k8s.io/cluster-api/controlplane/kubeadm/webhooks/admission"
	coreadmission "sigs.k8s.io/cluster-api/core/webhooks/admission"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/edgefleet/fleet/pkg/pki"
)

// webhooks.yaml.gz is written by `make generate` (hack/capicrds).
//
//go:embed webhooks.yaml.gz
var bundledWebhooks []byte

// Provider is one of the Cluster API binaries whose reconcilers run here;
// each serves its own admission webhooks, as in a real install.
type Provider string

// The providers, named as clusterctl names their components.
const (
	ProviderCore                Provider = "capi"
	ProviderKubeadmBootstrap    Provider = "capi-kubeadm-bootstrap"
	ProviderKubeadmControlPlane Provider = "capi-kubeadm-control-plane"
)

// servedKinds are the kinds whose webhooks each provider serves here: those
// of the kinds whose reconcilers run (Cluster API's binaries serve a few
// more, for kinds fleet does not run, whose configurations are left out).
var servedKinds = map[Provider][]string{
	ProviderCore: {"cluster", "clusterclass", "machine", "machineset", "machinedeployment",
		"machinehealthcheck", "machinedrainrule", "extensionconfig"},
	ProviderKubeadmBootstrap:    {"kubeadmconfig", "kubeadmconfigtemplate"},
	ProviderKubeadmControlPlane: {"kubeadmcontrolplane", "kubeadmcontrolplanetemplate"},
}

// Webhooks serves Cluster API's own admission webhooks (defaulting and
// validation) for the managers of one process: one webhook server per
// provider on a loopback port, and the Mutating- and
// ValidatingWebhookConfigurations Cluster API ships, pointed at those
// servers with a CA of their own. A real install gets the same from its
// Services and cert-manager.
type Webhooks struct {
	host  string
	ca    *pki.CA
	cert  tls.Certificate
	ports map[Provider]int
}

// NewWebhooks makes a CA and a serving certificate for host (an IP
// address) and picks a free port per provider.
func NewWebhooks(host string) (*Webhooks, error) {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("webhook host %q: want an IP address", host)
	}
	ca, err := pki.NewCA("fleet cluster-api webhooks", 10*365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	cert, err := ca.ServingCertificate(nil, []net.IP{ip}, 10*365*24*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("making the webhooks' serving certificate: %w", err)
	}
	w := &Webhooks{host: host, ca: ca, cert: cert, ports: map[Provider]int{}}
	for p := range servedKinds {
		if w.ports[p], err = freePort(host); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port for a webhook server: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// server is the webhook server of provider p's manager.
func (w *Webhooks) server(p Provider) webhook.Server {
	return webhook.NewServer(webhook.Options{
		Host: w.host,
		Port: w.ports[p],
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &w.cert, nil }
			// HTTP/1.1 only, as Cluster API's binaries serve their
			// webhooks: HTTP/2's rapid reset (CVE-2023-44487).
			c.NextProtos = []string{"http/1.1"}
		}},
	})
}

// setupCoreWebhooks registers core's webhooks as capi-controller-manager does.
func setupCoreWebhooks(mgr ctrl.Manager, cc clustercache.ClusterCache) error {
	return setupAll(mgr,
		&coreadmission.Cluster{Client: mgr.GetClient(), ClusterCacheReader: cc},
		&coreadmission.ClusterClass{Client: mgr.GetClient()},
		&coreadmission.Machine{},
		&coreadmission.MachineSet{},
		&coreadmission.MachineDeployment{},
		&coreadmission.MachineHealthCheck{},
		&coreadmission.MachineDrainRule{},
		&coreadmission.ExtensionConfig{},
	)
}

func setupKubeadmBootstrapWebhooks(mgr ctrl.Manager) error {
	return setupAll(mgr, &bootstrapadmission.KubeadmConfig{}, &bootstrapadmission.KubeadmConfigTemplate{})
}

func setupKubeadmControlPlaneWebhooks(mgr ctrl.Manager) error {
	return setupAll(mgr,
		&controlplaneadmission.KubeadmControlPlane{},
		&controlplaneadmission.ScaleValidator{Client: mgr.GetClient()},
		&controlplaneadmission.KubeadmControlPlaneTemplate{},
	)
}

type webhookSetup interface {
	SetupWebhookWithManager(ctrl.Manager) error
}

func setupAll(mgr ctrl.Manager, hooks ...webhookSetup) error {
	for _, h := range hooks {
		if err := h.SetupWebhookWithManager(mgr); err != nil {
			return fmt.Errorf("setting up Cluster API webhook %T: %w", h, err)
		}
	}
	return nil
}

// WaitServing waits until the webhook servers of providers answer TLS with
// the certificate the configurations trust.
func (w *Webhooks) WaitServing(ctx context.Context, providers ...Provider) error {
	pool := x509.NewCertPool()
	pool.AddCert(w.ca.Cert)
	for _, p := range providers {
		addr := net.JoinHostPort(w.host, strconv.Itoa(w.ports[p]))
		for {
			d := tls.Dialer{Config: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				_ = conn.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the %s webhook server on %s: %w (last: %v)", p, addr, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Install creates or updates the webhook configurations of providers,
// pointed at this process's servers. Install them only once the servers
// answer (WaitServing): the API server refuses every request a
// configuration covers while its webhook cannot be reached.
func (w *Webhooks) Install(ctx context.Context, c client.Client, providers ...Provider) error {
	mutating, validating, err := w.Configurations(providers...)
	if err != nil {
		return err
	}
	for _, m := range mutating {
		obj := &admissionv1.MutatingWebhookConfiguration{}
		obj.Name = m.Name
		if _, err := controllerutil.CreateOrUpdate(ctx, c, obj, func() error {
			obj.Webhooks = m.Webhooks
			return nil
		}); err != nil {
			return fmt.Errorf("installing MutatingWebhookConfiguration %s: %w", m.Name, err)
		}
	}
	for _, v := range validating {
		obj := &admissionv1.ValidatingWebhookConfiguration{}
		obj.Name = v.Name
		if _, err := controllerutil.CreateOrUpdate(ctx, c, obj, func() error {
			obj.Webhooks = v.Webhooks
			return nil
		}); err != nil {
			return fmt.Errorf("installing ValidatingWebhookConfiguration %s: %w", v.Name, err)
		}
	}
	return nil
}

// Uninstall deletes the webhook configurations Install writes for
// providers, wherever they point.
func (w *Webhooks) Uninstall(ctx context.Context, c client.Client, providers ...Provider) error {
	mutating, validating, err := w.Configurations(providers...)
	if err != nil {
		return err
	}
	for _, m := range mutating {
		if err := client.IgnoreNotFound(c.Delete(ctx, m)); err != nil {
			return fmt.Errorf("deleting MutatingWebhookConfiguration %s: %w", m.Name, err)
		}
	}
	for _, v := range validating {
		if err := client.IgnoreNotFound(c.Delete(ctx, v)); err != nil {
			return fmt.Errorf("deleting ValidatingWebhookConfiguration %s: %w", v.Name, err)
		}
	}
	return nil
}

// Configurations returns Cluster API's webhook configurations for
// providers, named as a clusterctl install names them, each webhook
// pointed at its provider's server here and trusting this CA; webhooks of
// kinds not served here are left out.
func (w *Webhooks) Configurations(providers ...Provider) ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	docs, err := bundledWebhookDocs()
	if err != nil {
		return nil, nil, err
	}
	want := map[Provider]bool{}
	for _, p := range providers {
		want[p] = true
	}
	var mutating []*admissionv1.MutatingWebhookConfiguration
	var validating []*admissionv1.ValidatingWebhookConfiguration
	for _, d := range docs {
		switch o := d.(type) {
		case *admissionv1.MutatingWebhookConfiguration:
			var keep []admissionv1.MutatingWebhook
			var p Provider
			for _, h := range o.Webhooks {
				if p = providerOf(h.Rules); want[p] && w.point(p, &h.ClientConfig) {
					keep = append(keep, h)
				}
			}
			if len(keep) > 0 {
				o.Name, o.Webhooks = string(p)+"-"+o.Name, keep
				mutating = append(mutating, o)
			}
		case *admissionv1.ValidatingWebhookConfiguration:
			var keep []admissionv1.ValidatingWebhook
			var p Provider
			for _, h := range o.Webhooks {
				if p = providerOf(h.Rules); want[p] && w.point(p, &h.ClientConfig) {
					keep = append(keep, h)
				}
			}
			if len(keep) > 0 {
				o.Name, o.Webhooks = string(p)+"-"+o.Name, keep
				validating = append(validating, o)
			}
		}
	}
	return mutating, validating, nil
}

// point aims a webhook at provider p's server, and reports whether p
// serves it here.
func (w *Webhooks) point(p Provider, cc *admissionv1.WebhookClientConfig) bool {
	if cc.Service == nil || cc.Service.Path == nil {
		return false
	}
	path := *cc.Service.Path
	_, kind, ok := strings.Cut(path, "-v1beta2-")
	if !ok || !slices.Contains(servedKinds[p], kind) {
		return false
	}
	url := "https://" + net.JoinHostPort(w.host, strconv.Itoa(w.ports[p])) + path
	*cc = admissionv1.WebhookClientConfig{URL: &url, CABundle: w.ca.CertPEM}
	return true
}

// providerOf tells which provider serves a webhook by the API group it
// covers.
func providerOf(rules []admissionv1.RuleWithOperations) Provider {
	for _, r := range rules {
		for _, g := range r.APIGroups {
			switch g {
			case BootstrapGroup:
				return ProviderKubeadmBootstrap
			case ControlPlaneGroup:
				return ProviderKubeadmControlPlane
			}
		}
	}
	return ProviderCore
}

func bundledWebhookDocs() ([]runtime.Object, error) {
	zr, err := gzip.NewReader(bytes.NewReader(bundledWebhooks))
	if err != nil {
		return nil, fmt.Errorf("reading bundled Cluster API webhook configurations: %w", err)
	}
	dec := utilyaml.NewYAMLReader(bufio.NewReader(zr))
	var out []runtime.Object
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading bundled Cluster API webhook configurations: %w", err)
		}
		var meta struct{ Kind string }
		if err := utilyaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("decoding a bundled webhook configuration: %w", err)
		}
		var obj runtime.Object
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			obj = &admissionv1.MutatingWebhookConfiguration{}
		case "ValidatingWebhookConfiguration":
			obj = &admissionv1.ValidatingWebhookConfiguration{}
		default:
			continue
		}
		if err := utilyaml.Unmarshal(doc, obj); err != nil {
			return nil, fmt.Errorf("decoding a bundled %s: %w", meta.Kind, err)
		}
		out = append(out, obj)
	}
	if len(out) == 0 {
		return nil, errors.New("no bundled Cluster API webhook configurations")
	}
	return out, nil
}
