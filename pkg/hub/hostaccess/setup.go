package hostaccess

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	"github.com/edgefleet/fleet/pkg/hub/identity"
)

const servingValidity = 365 * 24 * time.Hour

// Options set the host-access API up.
type Options struct {
	// Addr is the host:port it listens on; port 0 picks a free one.
	Addr string
	// Namespace is the hub's; it keeps the serving CA (CASecretName,
	// default fleet-host-access-ca) and the Service.
	Namespace, CASecretName string
	// ReplicaName names this replica in errors.
	ReplicaName string
	// DNSNames and IPs are what the serving certificate covers besides
	// the Service's name.
	DNSNames []string
	IPs      []net.IP
	// Register makes the hub keep the APIService that registers the API
	// with the aggregation layer, pointing at Service in Namespace on
	// ServicePort (default 443).
	Register    bool
	Service     string
	ServicePort int32
	// Forward carries a request for a host whose agent another replica
	// serves to that replica, at the address the host's status records
	// (hubReplicaProxy's host) and this replica's host-access port. It
	// needs Service (the peers' certificates name it).
	Forward bool
	// ExternalName makes the hub keep Service itself, of type
	// ExternalName, pointing at this host name and, as ServicePort, at
	// the port it listens on: for an API server that reaches the hub
	// directly (the embedded hub, tests).
	ExternalName string
}

// Setup adds the host-access API to mgr, serving the agents whose
// sessions sessions holds.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options, sess Sessions) (*Server, error) {
	if o.CASecretName == "" {
		o.CASecretName = "fleet-host-access-ca"
	}
	if o.ServicePort == 0 {
		o.ServicePort = 443
	}
	if o.Register && o.Service == "" {
		return nil, fmt.Errorf("host-access API: registering it needs the name of its Service")
	}
	l, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("host-access API: listening on %s: %w", o.Addr, err)
	}
	if o.ExternalName != "" {
		o.ServicePort = int32(l.Addr().(*net.TCPAddr).Port)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(authorizationv1.AddToScheme(scheme))
	utilruntime.Must(eventsv1.AddToScheme(scheme))
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme})
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("host-access API: %w", err)
	}
	ca, err := identity.EnsureCA(ctx, direct, direct, o.Namespace, o.CASecretName)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("host-access API: %w", err)
	}
	dns := o.DNSNames
	if o.Service != "" {
		// The aggregation layer checks the certificate against this name.
		dns = append([]string{o.Service + "." + o.Namespace + ".svc"}, dns...)
	}
	if len(dns) == 0 && len(o.IPs) == 0 {
		dns = []string{"localhost"}
	}
	s := &Server{
		opts:     o,
		listener: l,
		certs:    &identity.ServingCert{CA: ca, DNSNames: dns, IPs: o.IPs, Validity: servingValidity, Name: "the host-access API"},
		reader:   mgr.GetClient(),
		direct:   direct,
		proxy:    &frontProxy{reader: direct},
		sessions: sess,
		log:      mgr.GetLogger().WithName("hostaccess"),
	}
	if o.Forward && o.Service != "" {
		_, port, _ := net.SplitHostPort(l.Addr().String())
		s.forwarder = newForwarder(ca, dns[0], port)
	}
	if _, err := s.certs.Get(); err != nil {
		l.Close()
		return nil, err
	}
	if err := mgr.Add(s); err != nil {
		l.Close()
		return nil, fmt.Errorf("adding the host-access API: %w", err)
	}
	if !o.Register {
		return s, nil
	}
	caPEM := ca.CertPEM
	return s, mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// The APIService is kept, not set once: an install that applies
		// its manifests again, or a new CA, must not leave it stale.
		for delay := 2 * time.Second; ; {
			err := s.register(ctx, caPEM)
			if err != nil {
				s.log.Info("cannot register the host-access API with the aggregation layer; `kubectl fleet host logs|facts` "+
					"fail until then", "error", err.Error(), "retryIn", delay)
				delay = min(2*delay, 5*time.Minute)
			} else {
				delay = 5 * time.Minute
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
		}
	}))
}

// register creates or corrects the APIService (and, with ExternalName,
// its Service).
func (s *Server) register(ctx context.Context, caPEM []byte) error {
	o := s.opts
	if o.ExternalName != "" {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Service}}
		if _, err := ctrl.CreateOrUpdate(ctx, s.direct, svc, func() error {
			svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: o.ExternalName,
				Ports: []corev1.ServicePort{{Name: "https", Port: o.ServicePort, Protocol: corev1.ProtocolTCP}}}
			return nil
		}); err != nil {
			return fmt.Errorf("keeping Service %s/%s: %w", o.Namespace, o.Service, err)
		}
	}
	want := map[string]any{
		"group":                hostaccess.Group,
		"version":              hostaccess.Version,
		"groupPriorityMinimum": int64(1000),
		"versionPriority":      int64(15),
		"caBundle":             base64.StdEncoding.EncodeToString(caPEM),
		"service":              map[string]any{"namespace": o.Namespace, "name": o.Service, "port": int64(o.ServicePort)},
	}
	cur := &unstructured.Unstructured{}
	cur.SetAPIVersion("apiregistration.k8s.io/v1")
	cur.SetKind("APIService")
	err := s.direct.Get(ctx, client.ObjectKey{Name: hostaccess.APIServiceName}, cur)
	switch {
	case apierrors.IsNotFound(err):
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": want}}
		obj.SetAPIVersion("apiregistration.k8s.io/v1")
		obj.SetKind("APIService")
		obj.SetName(hostaccess.APIServiceName)
		obj.SetLabels(map[string]string{"app.kubernetes.io/name": "fleet-hub"})
		if err := s.direct.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating APIService %s: %w", hostaccess.APIServiceName, err)
		}
		s.log.Info("Registered the host-access API", "apiService", hostaccess.APIServiceName,
			"service", o.Namespace+"/"+o.Service+":"+strconv.Itoa(int(o.ServicePort)))
		return nil
	case err != nil:
		return fmt.Errorf("reading APIService %s: %w", hostaccess.APIServiceName, err)
	}
	spec, _, _ := unstructured.NestedMap(cur.Object, "spec")
	if equality.Semantic.DeepEqual(spec, want) {
		return nil
	}
	if err := unstructured.SetNestedMap(cur.Object, want, "spec"); err != nil {
		return err
	}
	if err := s.direct.Update(ctx, cur); err != nil {
		return fmt.Errorf("updating APIService %s: %w", hostaccess.APIServiceName, err)
	}
	return nil
}
