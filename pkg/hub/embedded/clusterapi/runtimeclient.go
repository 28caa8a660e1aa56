package clusterapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimecatalog "sigs.k8s.io/cluster-api/api/runtime/catalog"
	runtimehooksv1 "sigs.k8s.io/cluster-api/api/runtime/hooks/v1alpha1"
	runtimev1 "sigs.k8s.io/cluster-api/api/runtime/v1beta2"
	runtimeclient "sigs.k8s.io/cluster-api/exp/runtime/client"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxExtensionResponse bounds what a runtime extension may answer.
const maxExtensionResponse = 20 << 20

// RuntimeClient calls Cluster API runtime extensions over HTTPS for the
// reconcilers of this process. It implements Cluster API's exported
// runtime client interface with the behaviour of the one in
// capi-controller-manager (an internal package, so not importable):
// discovery, a registry of the ExtensionConfigs' handlers, namespace
// selectors, settings, timeouts, failure policies and cached answers.
type RuntimeClient struct {
	catalog *runtimecatalog.Catalog
	reader  client.Reader

	mu       sync.RWMutex
	ready    bool
	handlers map[string]registration // by "<handler>.<ExtensionConfig>"
}

type registration struct {
	name, extension, resourceVersion string
	gvh                              runtimecatalog.GroupVersionHook
	config                           runtimev1.ClientConfig
	selector                         labels.Selector
	settings                         map[string]string
	timeout                          time.Duration
	failurePolicy                    runtimev1.FailurePolicy
}

var _ runtimeclient.Client = &RuntimeClient{}

// NewRuntimeClient returns a client knowing Cluster API's hooks; reader
// reads Namespaces for the ExtensionConfigs' namespace selectors.
func NewRuntimeClient(reader client.Reader) (*RuntimeClient, error) {
	catalog := runtimecatalog.New()
	if err := runtimehooksv1.AddToCatalog(catalog); err != nil {
		return nil, fmt.Errorf("building the Runtime SDK catalog: %w", err)
	}
	return &RuntimeClient{catalog: catalog, reader: reader, handlers: map[string]registration{}}, nil
}

// WarmUp registers every ExtensionConfig of the list and makes the client
// ready.
func (c *RuntimeClient) WarmUp(list *runtimev1.ExtensionConfigList) error {
	var errs []error
	for i := range list.Items {
		if err := c.Register(&list.Items[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.mu.Lock()
	c.ready = true
	c.mu.Unlock()
	return nil
}

// IsReady says whether WarmUp has run.
func (c *RuntimeClient) IsReady() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ready
}

// Discover asks the extension for its handlers and returns the
// ExtensionConfig with them in its status.
func (c *RuntimeClient) Discover(ctx context.Context, ec *runtimev1.ExtensionConfig) (*runtimev1.ExtensionConfig, error) {
	gvh, err := c.catalog.GroupVersionHook(runtimehooksv1.Discovery)
	if err != nil {
		return nil, err
	}
	resp := &runtimehooksv1.DiscoveryResponse{}
	if err := c.post(ctx, ec.Spec.ClientConfig, gvh, "", 10*time.Second, &runtimehooksv1.DiscoveryRequest{}, resp); err != nil {
		return nil, fmt.Errorf("discovering extension %q: %w", ec.Name, err)
	}
	if resp.GetStatus() != runtimehooksv1.ResponseStatusSuccess {
		return nil, fmt.Errorf("discovering extension %q: status %q: %s", ec.Name, resp.GetStatus(), resp.GetMessage())
	}
	out := ec.DeepCopy()
	out.Status.Handlers = []runtimev1.ExtensionHandler{}
	seen := map[string]bool{}
	for _, h := range resp.Handlers {
		timeout, policy := int32(runtimehooksv1.DefaultHandlersTimeoutSeconds), runtimehooksv1.FailurePolicyFail
		if h.TimeoutSeconds != nil {
			timeout = *h.TimeoutSeconds
		}
		if h.FailurePolicy != nil {
			policy = *h.FailurePolicy
		}
		gv, err := schema.ParseGroupVersion(h.RequestHook.APIVersion)
		switch {
		case seen[h.Name]:
			return nil, fmt.Errorf("discovering extension %q: handler %q named twice", ec.Name, h.Name)
		case len(validation.IsDNS1123Label(h.Name)) > 0:
			return nil, fmt.Errorf("discovering extension %q: handler name %q is not a DNS label", ec.Name, h.Name)
		case timeout < 0 || timeout > 30:
			return nil, fmt.Errorf("discovering extension %q: handler %q timeoutSeconds %d is not within 0..30", ec.Name, h.Name, timeout)
		case policy != runtimehooksv1.FailurePolicyFail && policy != runtimehooksv1.FailurePolicyIgnore:
			return nil, fmt.Errorf("discovering extension %q: handler %q failurePolicy %q", ec.Name, h.Name, policy)
		case err != nil:
			return nil, fmt.Errorf("discovering extension %q: handler %q: %w", ec.Name, h.Name, err)
		case !c.catalog.IsHookRegistered(runtimecatalog.GroupVersionHook{Group: gv.Group, Version: gv.Version, Hook: h.RequestHook.Hook}):
			return nil, fmt.Errorf("discovering extension %q: handler %q serves %s/%s, which is not in the catalog", ec.Name, h.Name, h.RequestHook.APIVersion, h.RequestHook.Hook)
		}
		seen[h.Name] = true
		out.Status.Handlers = append(out.Status.Handlers, runtimev1.ExtensionHandler{
			Name:           h.Name + "." + ec.Name,
			RequestHook:    runtimev1.GroupVersionHook{APIVersion: h.RequestHook.APIVersion, Hook: h.RequestHook.Hook},
			TimeoutSeconds: timeout,
			FailurePolicy:  runtimev1.FailurePolicy(policy),
		})
	}
	return out, nil
}

// Register replaces the handlers of ec with those in its status.
func (c *RuntimeClient) Register(ec *runtimev1.ExtensionConfig) error {
	selector := labels.Everything()
	if ec.Spec.NamespaceSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(ec.Spec.NamespaceSelector)
		if err != nil {
			return fmt.Errorf("registering ExtensionConfig %q: namespaceSelector: %w", ec.Name, err)
		}
		selector = s
	}
	regs := make([]registration, 0, len(ec.Status.Handlers))
	for _, h := range ec.Status.Handlers {
		gv, err := schema.ParseGroupVersion(h.RequestHook.APIVersion)
		if err != nil {
			return fmt.Errorf("registering ExtensionConfig %q: handler %q: %w", ec.Name, h.Name, err)
		}
		regs = append(regs, registration{
			name: h.Name, extension: ec.Name, resourceVersion: ec.ResourceVersion,
			gvh:    runtimecatalog.GroupVersionHook{Group: gv.Group, Version: gv.Version, Hook: h.RequestHook.Hook},
			config: ec.Spec.ClientConfig, selector: selector, settings: ec.Spec.Settings,
			timeout: time.Duration(h.TimeoutSeconds) * time.Second, failurePolicy: h.FailurePolicy,
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(ec.Name)
	for _, r := range regs {
		c.handlers[r.name] = r
	}
	return nil
}

// Unregister forgets the handlers of ec.
func (c *RuntimeClient) Unregister(ec *runtimev1.ExtensionConfig) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(ec.Name)
	return nil
}

func (c *RuntimeClient) removeLocked(extension string) {
	for name, r := range c.handlers {
		if r.extension == extension {
			delete(c.handlers, name)
		}
	}
}

// GetAllExtensions names the handlers of hook whose namespace selector
// matches forObject's namespace.
func (c *RuntimeClient) GetAllExtensions(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object) ([]string, error) {
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return nil, err
	}
	c.mu.RLock()
	var regs []registration
	for _, r := range c.handlers {
		if r.gvh.GroupHook() == gvh.GroupHook() {
			regs = append(regs, r)
		}
	}
	c.mu.RUnlock()
	names := []string{}
	for _, r := range regs {
		ok, err := c.matchNamespace(ctx, r.selector, forObject.GetNamespace())
		if err != nil {
			return nil, fmt.Errorf("listing the handlers of hook %s: %w", gvh.Hook, err)
		}
		if ok {
			names = append(names, r.name)
		}
	}
	return names, nil
}

// CallAllExtensions calls every matching handler of hook and aggregates
// their successful answers (lowest retry, messages joined).
func (c *RuntimeClient) CallAllExtensions(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object, req runtimehooksv1.RequestObject, resp runtimehooksv1.ResponseObject) error {
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return err
	}
	names, err := c.GetAllExtensions(ctx, hook, forObject)
	if err != nil {
		return err
	}
	resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
	var messages []string
	for _, name := range names {
		obj, err := c.catalog.NewResponse(gvh)
		if err != nil {
			return err
		}
		one := obj.(runtimehooksv1.ResponseObject)
		if err := c.CallExtension(ctx, hook, forObject, name, req, one); err != nil {
			return fmt.Errorf("calling the handlers of hook %s: %w", gvh.Hook, err)
		}
		if all, ok := resp.(runtimehooksv1.RetryResponseObject); ok {
			mine := one.(runtimehooksv1.RetryResponseObject).GetRetryAfterSeconds()
			if have := all.GetRetryAfterSeconds(); mine != 0 && (have == 0 || mine < have) {
				all.SetRetryAfterSeconds(mine)
			}
		}
		if m := one.GetMessage(); m != "" {
			messages = append(messages, m)
		}
	}
	resp.SetMessage(strings.Join(messages, ", "))
	return nil
}

// CallExtension calls the named handler; a Failure answer is an error, and
// so is a failed call unless the handler's failure policy is Ignore.
func (c *RuntimeClient) CallExtension(ctx context.Context, hook runtimecatalog.Hook, forObject client.Object, name string,
	req runtimehooksv1.RequestObject, resp runtimehooksv1.ResponseObject, opts ...runtimeclient.CallExtensionOption) error {
	o := &runtimeclient.CallExtensionOptions{}
	for _, opt := range opts {
		opt.ApplyToOptions(o)
	}
	gvh, err := c.catalog.GroupVersionHook(hook)
	if err != nil {
		return err
	}
	if err := c.catalog.ValidateRequest(gvh, req); err != nil {
		return fmt.Errorf("calling extension handler %q: %w", name, err)
	}
	if err := c.catalog.ValidateResponse(gvh, resp); err != nil {
		return fmt.Errorf("calling extension handler %q: %w", name, err)
	}
	c.mu.RLock()
	r, ok := c.handlers[name]
	c.mu.RUnlock()
	switch {
	case !ok:
		return fmt.Errorf("calling extension handler %q: not registered", name)
	case r.gvh.GroupHook() != gvh.GroupHook():
		return fmt.Errorf("calling extension handler %q: it does not serve %s", name, gvh.GroupHook())
	case r.gvh.Version != gvh.Version:
		return fmt.Errorf("calling extension handler %q: it serves version %s of %s, this client only %s", name, r.gvh.Version, gvh.Hook, gvh.Version)
	}
	if ok, err := c.matchNamespace(ctx, r.selector, forObject.GetNamespace()); err != nil || !ok {
		return fmt.Errorf("calling extension handler %q: its namespace selector does not match %s/%s (%v)", name, forObject.GetNamespace(), forObject.GetName(), err)
	}
	req = req.DeepCopyObject().(runtimehooksv1.RequestObject)
	settings := map[string]string{}
	for k, v := range r.settings {
		settings[k] = v
	}
	for k, v := range req.GetSettings() {
		settings[k] = v
	}
	req.SetSettings(settings)

	var key string
	if o.WithCaching {
		key = o.CacheKeyFunc(r.name, r.resourceVersion, req)
		if hit, ok := o.Cache.Has(key); ok {
			out, cached := reflect.ValueOf(resp), reflect.ValueOf(hit.Response)
			if !cached.Type().AssignableTo(out.Type()) {
				return fmt.Errorf("calling extension handler %q: cached answer is a %s, not a %s", name, cached.Type(), out.Type())
			}
			reflect.Indirect(out).Set(reflect.Indirect(cached))
			return nil
		}
	}
	timeout := r.timeout
	if timeout == 0 {
		timeout = runtimehooksv1.DefaultHandlersTimeoutSeconds * time.Second
	}
	handler := name[:len(name)-len(r.extension)-1]
	if err := c.post(ctx, r.config, r.gvh, handler, timeout, req, resp); err != nil {
		if r.failurePolicy == runtimev1.FailurePolicyIgnore {
			resp.SetStatus(runtimehooksv1.ResponseStatusSuccess)
			resp.SetMessage("")
			return nil
		}
		return fmt.Errorf("calling extension handler %q: %w", name, err)
	}
	if s := resp.GetStatus(); s != runtimehooksv1.ResponseStatusSuccess {
		return fmt.Errorf("calling extension handler %q: answered %s: %s", name, s, resp.GetMessage())
	}
	if o.WithCaching {
		o.Cache.Add(runtimeclient.CallExtensionCacheEntry{CacheKey: key, Response: resp})
	}
	return nil
}

func (c *RuntimeClient) matchNamespace(ctx context.Context, selector labels.Selector, namespace string) (bool, error) {
	if selector.Empty() {
		return true, nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"})
	if err := c.reader.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return false, fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	return selector.Matches(labels.Set(ns.GetLabels())), nil
}

// post sends req to the handler's path under the extension's URL and
// decodes its answer into resp.
func (c *RuntimeClient) post(ctx context.Context, cfg runtimev1.ClientConfig, gvh runtimecatalog.GroupVersionHook, handler string,
	timeout time.Duration, req, resp any) error {
	u, err := extensionURL(cfg)
	if err != nil {
		return err
	}
	u.Path = path.Join(u.Path, runtimecatalog.GVHToPath(gvh, handler))
	q := u.Query()
	q.Set("timeout", timeout.String())
	u.RawQuery = q.Encode()
	if r, ok := req.(runtimehooksv1.RequestObject); ok {
		kind, err := c.catalog.Request(gvh)
		if err != nil {
			return err
		}
		r.GetObjectKind().SetGroupVersionKind(kind)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	pool := x509.NewCertPool()
	if len(cfg.CABundle) > 0 && !pool.AppendCertsFromPEM(cfg.CABundle) {
		return errors.New("the ExtensionConfig's caBundle holds no PEM certificate")
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if len(cfg.CABundle) > 0 {
		tlsConfig.RootCAs = pool
	}
	hc := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(httpReq)
	if err != nil {
		return fmt.Errorf("http call failed: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxExtensionResponse))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		if len(data) > 512 {
			data = data[:512]
		}
		return fmt.Errorf("http call failed: status %d: %q", res.StatusCode, data)
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

func extensionURL(cfg runtimev1.ClientConfig) (*url.URL, error) {
	if svc := cfg.Service; svc.IsDefined() {
		host := svc.Name + "." + svc.Namespace + ".svc"
		if svc.Port != nil {
			host = net.JoinHostPort(host, strconv.Itoa(int(*svc.Port)))
		}
		return &url.URL{Scheme: "https", Host: host, Path: svc.Path}, nil
	}
	if cfg.URL == "" {
		return nil, errors.New("the ExtensionConfig's clientConfig has neither a service nor a url")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("the ExtensionConfig's url: %w", err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("the ExtensionConfig's url %q: want https", cfg.URL)
	}
	return u, nil
}
