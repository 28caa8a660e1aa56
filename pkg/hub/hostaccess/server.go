package hostaccess

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/hub/sessions"
	"github.com/edgefleet/fleet/pkg/transport"
)

// streamLimit is how many streams a session may carry when the hub opens
// a host-access one: the tunnels' limit and the agent's own host-access
// limit, so busy tunnels never lock an operator out.
const streamLimit = 32 + 4

// Sessions finds the session this replica holds with a host's agent.
type Sessions interface {
	Session(namespace, name string) *sessions.Session
}

// Server serves the host-access API.
type Server struct {
	opts     Options
	listener net.Listener
	certs    *identity.ServingCert
	reader   client.Reader // EdgeHosts, from the cache
	direct   client.Client // SubjectAccessReviews
	proxy    *frontProxy
	sessions Sessions
	// forwarder carries requests to the replica holding a host's
	// session; nil when replicas do not forward.
	forwarder *forwarder
	log       logr.Logger
}

// NeedLeaderElection is false: every replica serves its own agents.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr is where the server listens.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.certs.Get() },
			// The aggregation layer's client certificate is checked per
			// request against the CA the API server publishes, which can
			// change while the hub runs.
			ClientAuth: tls.RequestClientCert,
			NextProtos: []string{"http/1.1"},
		},
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.Info("Serving the host-access API", "address", s.Addr())
	if err := srv.ServeTLS(s.listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("host-access API: %w", err)
	}
	return nil
}

// Handler routes the API's paths.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	gv := "/apis/" + hostaccess.GroupVersion
	mux.HandleFunc("GET /apis", s.serveGroupList)
	mux.HandleFunc("GET /apis/"+hostaccess.Group, s.serveGroup)
	mux.HandleFunc("GET "+gv, s.serveResources)
	mux.HandleFunc("GET "+gv+"/namespaces/{namespace}/"+hostaccess.Resource+"/{name}/{subresource}", s.serveSubresource)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the host-access API has no "+r.URL.Path)
	})
	return mux
}

func (s *Server) serveSubresource(w http.ResponseWriter, r *http.Request) {
	ns, name, sub := r.PathValue("namespace"), r.PathValue("name"), r.PathValue("subresource")
	code := s.subresource(w, r, ns, name, sub)
	requests.WithLabelValues(sub, strconv.Itoa(code)).Inc()
}

// subresource serves one request and returns its status code.
func (s *Server) subresource(w http.ResponseWriter, r *http.Request, ns, name, sub string) int {
	fail := func(code int, reason metav1.StatusReason, format string, args ...any) int {
		writeStatus(w, code, reason, fmt.Sprintf(format, args...))
		return code
	}
	if sub != hostaccess.SubresourceLog && sub != hostaccess.SubresourceFacts {
		return fail(http.StatusNotFound, metav1.StatusReasonNotFound, "edgehosts has no subresource %q (log, facts)", sub)
	}
	// A peer replica's forward was authorized and recorded there.
	forwardedFor, forwarded := s.forwarder.verify(r)
	u := &user{Name: forwardedFor}
	if !forwarded {
		var err error
		if u, err = s.proxy.authenticate(r); err != nil {
			if !errors.Is(err, errUnauthenticated) {
				// The caller has proven nothing yet: the API server's
				// text stays in the hub's log.
				s.log.Info("Cannot authenticate host-access requests", "error", err.Error())
				return fail(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
					"the hub cannot check the aggregation layer's certificate now; retry later")
			}
			s.log.V(1).Info("Refused an unauthenticated host-access request", "error", err.Error())
			return fail(http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "%v", err)
		}
		if err := s.authorize(r.Context(), u, ns, name, sub); err != nil {
			return fail(http.StatusForbidden, metav1.StatusReasonForbidden, "%v", err)
		}
	}
	// The log's options, checked before anything is asked of anyone;
	// nil for the facts.
	var req *wire.Logs
	if sub == hostaccess.SubresourceLog {
		var err error
		if req, err = logsRequest(r); err != nil {
			return fail(http.StatusBadRequest, metav1.StatusReasonBadRequest, "%v", err)
		}
	}
	host := &infrav1.EdgeHost{}
	if err := s.reader.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, host); err != nil {
		if apierrors.IsNotFound(err) {
			return fail(http.StatusNotFound, metav1.StatusReasonNotFound, "edgehost %q not found in namespace %q", name, ns)
		}
		return fail(http.StatusInternalServerError, metav1.StatusReasonInternalError, "reading EdgeHost %s/%s: %v", ns, name, err)
	}
	ss := s.sessions.Session(ns, name)
	if ss == nil {
		rep, peer := host.Status.HubReplica, host.Status.HubReplicaProxy
		if !forwarded && s.forwarder != nil && rep != "" && rep != s.opts.ReplicaName && peer != "" {
			s.recordAccess(r.Context(), host, u, req)
			code, err := s.forwarder.forward(r.Context(), w, r, peer, u.Name)
			if err == nil {
				return code
			}
			return fail(http.StatusBadGateway, metav1.StatusReasonServiceUnavailable,
				"the agent of EdgeHost %s/%s is connected to hub replica %s, which did not answer: %v", ns, name, rep, err)
		}
		msg := fmt.Sprintf("the agent of EdgeHost %s/%s is not connected to the hub", ns, name)
		if rep != "" && rep != s.opts.ReplicaName {
			msg = fmt.Sprintf("the agent of EdgeHost %s/%s is connected to hub replica %s, not to %s", ns, name, rep, s.opts.ReplicaName)
		}
		return fail(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "%s", msg)
	}
	capability := wire.CapabilityLogs
	if sub == hostaccess.SubresourceFacts {
		capability = wire.CapabilityFacts
	}
	if !ss.Can(capability) {
		return fail(http.StatusNotImplemented, metav1.StatusReasonMethodNotAllowed,
			"fleet-agent %s on EdgeHost %s/%s cannot serve %s: upgrade it", ss.AgentVersion(), ns, name, sub)
	}
	if !forwarded {
		s.recordAccess(r.Context(), host, u, req)
	}
	if req == nil {
		return s.serveFacts(w, r, ss, host)
	}
	return s.serveLog(w, r, ss, req)
}

// recordAccess records who read what of host: its log as req asks, or
// its facts when req is nil.
func (s *Server) recordAccess(ctx context.Context, host *infrav1.EdgeHost, u *user, req *wire.Logs) {
	if req == nil {
		s.record(ctx, host, "HostFactsRead", u.Name+" read the host's facts")
		return
	}
	how := ""
	if req.Follow {
		how = ", following it"
	}
	s.record(ctx, host, "HostLogRead", fmt.Sprintf("%s read the %s log%s", u.Name, req.Source, how))
}

// record writes an Event of one access on the EdgeHost. Each is its own
// Event, never folded into a series with an earlier one: who read what
// is the point.
func (s *Server) record(ctx context.Context, host *infrav1.EdgeHost, reason, note string) {
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: host.Namespace, Name: fmt.Sprintf("%s.%x", host.Name, now.UnixNano())},
		EventTime:  metav1.MicroTime{Time: now},
		Regarding: corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: "EdgeHost",
			Namespace: host.Namespace, Name: host.Name, UID: host.UID, ResourceVersion: host.ResourceVersion},
		Type: corev1.EventTypeNormal, Reason: reason, Action: "Read", Note: note,
		ReportingController: "fleet.edgefleet.io/host-access", ReportingInstance: s.opts.ReplicaName,
	}
	if ev.ReportingInstance == "" {
		ev.ReportingInstance = "fleet-hub"
	}
	if err := s.direct.Create(ctx, ev); err != nil {
		s.log.Info("Cannot record a host access as an Event", "host", host.Namespace+"/"+host.Name, "note", note, "error", err.Error())
	}
}

// authorize asks the API server whether u may get the subresource.
func (s *Server) authorize(ctx context.Context, u *user, ns, name, sub string) error {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, UID: u.UID, Groups: u.Groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: hostaccess.Group,
			Version: hostaccess.Version, Resource: hostaccess.Resource, Subresource: sub, Name: name},
	}}
	for k, v := range u.Extra {
		if sar.Spec.Extra == nil {
			sar.Spec.Extra = map[string]authorizationv1.ExtraValue{}
		}
		sar.Spec.Extra[k] = v
	}
	if err := s.direct.Create(ctx, sar); err != nil {
		return fmt.Errorf("checking access: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		msg := fmt.Sprintf("%s %q cannot get resource \"%s/%s\" in API group %q in the namespace %q",
			"User", u.Name, hostaccess.Resource, sub, hostaccess.Group, ns)
		if sar.Status.Reason != "" {
			msg += ": " + sar.Status.Reason
		}
		return errors.New(msg)
	}
	return nil
}

func logsRequest(r *http.Request) (*wire.Logs, error) {
	q := r.URL.Query()
	req := &wire.Logs{Source: wire.LogSource(q.Get(hostaccess.ParamSource))}
	if req.Source == "" {
		req.Source = wire.LogAgent
	}
	for param, into := range map[string]*int64{hostaccess.ParamSinceSeconds: &req.SinceSeconds,
		hostaccess.ParamTailLines: &req.TailLines, hostaccess.ParamLimitBytes: &req.LimitBytes} {
		if v := q.Get(param); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("%s=%q: want a whole number ≥ 0", param, v)
			}
			*into = n
		}
	}
	if v := q.Get(hostaccess.ParamFollow); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("follow=%q: want true or false", v)
		}
		req.Follow = f
	}
	// The agent checks the same; checking here answers with a 400 and
	// asks nothing of the agent.
	frame, err := wire.Encode(req)
	if err == nil {
		_, err = wire.Decode(frame)
	}
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) {
			return nil, errors.New(we.Message)
		}
		return nil, err
	}
	return req, nil
}

// ask opens a stream to the agent, sends msg and reads the first answer.
func ask(ctx context.Context, ss *sessions.Session, msg any, maxReply int) (net.Conn, any, func(), error) {
	st, release, err := ss.OpenStream(streamLimit)
	if err != nil {
		return nil, nil, nil, err
	}
	done := func() { _ = st.Close(); release() }
	_ = st.SetDeadline(time.Now().Add(2 * transport.WriteTimeout))
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	fail := func(err error) (net.Conn, any, func(), error) {
		stop()
		done()
		return nil, nil, nil, err
	}
	frame, err := wire.EncodeAs(ss.Protocol(), msg)
	if err != nil {
		return fail(err)
	}
	if err := wire.WriteFrame(st, frame); err != nil {
		return fail(fmt.Errorf("asking the agent: %w", err))
	}
	reply, err := wire.ReadFrame(st, maxReply)
	if err != nil {
		return fail(fmt.Errorf("waiting for the agent's answer: %w", err))
	}
	answer, err := wire.Decode(reply)
	if err != nil {
		return fail(err)
	}
	if we, ok := answer.(*wire.Error); ok {
		return fail(we)
	}
	_ = st.SetDeadline(time.Time{})
	return st, answer, func() { stop(); done() }, nil
}

func agentFailure(w http.ResponseWriter, err error) int {
	var we *wire.Error
	switch {
	case errors.Is(err, sessions.ErrStreamBudget):
		writeStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, "the agent carries its maximum of streams; try again")
		return http.StatusTooManyRequests
	case errors.As(err, &we) && we.Code == wire.ErrRejected:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the agent says: "+we.Message)
		return http.StatusNotFound
	default:
		writeStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, "the agent did not answer: "+err.Error())
		return http.StatusBadGateway
	}
}

func (s *Server) serveFacts(w http.ResponseWriter, r *http.Request, ss *sessions.Session, host *infrav1.EdgeHost) int {
	_, answer, done, err := ask(r.Context(), ss, &wire.FactsRequest{}, wire.MaxFrameSize)
	if err != nil {
		return agentFailure(w, err)
	}
	done()
	report, ok := answer.(*wire.FactsReport)
	if !ok {
		return agentFailure(w, fmt.Errorf("it answered %T", answer))
	}
	out := hostaccess.EdgeHostFacts{
		TypeMeta:   metav1.TypeMeta{APIVersion: hostaccess.GroupVersion, Kind: "EdgeHostFacts"},
		ObjectMeta: metav1.ObjectMeta{Namespace: host.Namespace, Name: host.Name, UID: host.UID},
		Observed:   metav1.Now(),
		Report:     *report,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
	return http.StatusOK
}

func (s *Server) serveLog(w http.ResponseWriter, r *http.Request, ss *sessions.Session, req *wire.Logs) int {
	st, answer, done, err := ask(r.Context(), ss, req, wire.MaxTunnelFrameSize)
	if err != nil {
		return agentFailure(w, err)
	}
	defer done()
	if _, ok := answer.(*wire.LogsReady); !ok {
		return agentFailure(w, fmt.Errorf("it answered %T", answer))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	limit := req.LimitBytes
	if limit == 0 {
		limit = wire.MaxLogBytes
	}
	buf := make([]byte, 32<<10)
	var sent int64
	for req.Follow || sent < limit {
		n, err := st.Read(buf)
		if n > 0 {
			if !req.Follow {
				n = int(min(int64(n), limit-sent))
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			sent += int64(n)
			logBytes.Add(float64(n))
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	return http.StatusOK
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code),
	})
}
