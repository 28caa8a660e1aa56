package enrollment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/enrolltoken"
	"github.com/edgefleet/fleet/pkg/hub/admission"
	"github.com/edgefleet/fleet/pkg/pki"
)

// TokenIDLabel records which token enrolled a host.
const TokenIDLabel = "fleet.edgefleet.io/token-id"

// EnrollerOptions configure an Enroller.
type EnrollerOptions struct {
	// HubNamespace holds the enrollment tokens.
	HubNamespace string
	// ClientCertValidity is the lifetime of host certificates.
	ClientCertValidity time.Duration
	// MaxConcurrent enrollments hold a place at once; more wait up to
	// Wait for one (not positive: not at all), then are told to come back.
	MaxConcurrent int
	Wait          time.Duration
	// Rate and Burst limit enrollments across all callers.
	Rate  rate.Limit
	Burst int
}

// Enroller serves POST /v1/enroll: a token and a CSR become an EdgeHost
// and a client certificate signed by the hub CA.
type Enroller struct {
	opts EnrollerOptions
	// client reads EdgeHosts from the informer cache and writes; apiReader
	// reads tokens, which are not cached.
	client    client.Client
	apiReader client.Reader
	ca        *pki.CA
	log       logr.Logger
	limiter   *rate.Limiter
	places    *admission.Places
	// tokenLocks serialise enrollments per token (striped) on this replica.
	tokenLocks [64]sync.Mutex
}

// NewEnroller returns an Enroller signing with ca.
func NewEnroller(c client.Client, apiReader client.Reader, ca *pki.CA, log logr.Logger, opts EnrollerOptions) *Enroller {
	return &Enroller{opts: opts, client: c, apiReader: apiReader, ca: ca, log: log,
		limiter: rate.NewLimiter(opts.Rate, opts.Burst), places: admission.NewPlaces(opts.MaxConcurrent)}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	wire.Refusal{Code: code, Message: msg}.Write(w, status)
}

var tokenRefusals = []struct {
	err    error
	result string
}{
	{enrolltoken.ErrMalformed, "malformed"},
	{enrolltoken.ErrUnknown, "unknown"},
	{enrolltoken.ErrExpired, "expired"},
	{enrolltoken.ErrUsedUp, "used_up"},
	{enrolltoken.ErrRevoked, "revoked"},
}

// ServeHTTP enrolls a machine.
func (s *Enroller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.limiter.Allow() {
		enrollments.WithLabelValues("rate_limited").Inc()
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, "RateLimited", "too many enrollments; retry later")
		return
	}
	var req wire.EnrollRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, wire.MaxEnrollRequestSize))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		enrollments.WithLabelValues("bad_request").Inc()
		writeError(w, http.StatusBadRequest, "BadRequest", "enrollment request: "+err.Error())
		return
	}
	if err := req.Validate(); err != nil {
		enrollments.WithLabelValues("bad_request").Inc()
		writeError(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	// A place is taken only once the request is read: a client sending
	// its body slowly must not hold one. A request turned away comes back
	// after its Retry-After with two new TLS handshakes (the CA, then the
	// enrollment): waiting in line here costs the hub far less.
	if s.places.Take(r.Context(), s.opts.Wait) {
		defer s.places.Release()
	} else {
		enrollments.WithLabelValues("busy").Inc()
		// Not sooner: a fleet powering up at once is thousands of agents,
		// and each try is a TLS handshake.
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "Busy", "too many enrollments in progress; retry shortly")
		return
	}
	resp, status, code, err := s.enroll(r.Context(), &req)
	if err != nil {
		result := "error"
		for _, tr := range tokenRefusals {
			if errors.Is(err, tr.err) {
				result = tr.result
			}
		}
		if status == http.StatusBadRequest || status == http.StatusConflict {
			result = "bad_request"
		}
		if status == http.StatusServiceUnavailable {
			result = "busy"
			w.Header().Set("Retry-After", "1")
		}
		enrollments.WithLabelValues(result).Inc()
		// No part of what was sent as a secret is logged: an id only when
		// the token is well formed.
		s.log.Info("Refused enrollment", "reason", err.Error(), "hostname", req.Facts.Hostname,
			"tokenID", enrolltoken.PublicID(req.Token), "remote", r.RemoteAddr)
		msg := err.Error()
		if status == http.StatusInternalServerError {
			// The caller has not proven anything yet: the API server's
			// words stay in the hub's log.
			msg = "the hub could not complete the enrollment; retry later"
		}
		writeError(w, status, code, msg)
		return
	}
	enrollments.WithLabelValues("ok").Inc()
	s.log.Info("Enrolled host", "EdgeHost", resp.Namespace+"/"+resp.Host, "tokenID", enrolltoken.PublicID(req.Token))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

func (s *Enroller) enroll(ctx context.Context, req *wire.EnrollRequest) (*wire.EnrollResponse, int, string, error) {
	// Everything that can be checked without the token is checked first,
	// so a bad request never spends a one-time token.
	csr, err := pki.ParseCSR(req.CSR)
	if err != nil {
		return nil, http.StatusBadRequest, "BadRequest", fmt.Errorf("csr refused: %w", err)
	}
	if hostName(req.Facts.Hostname) == "" {
		return nil, http.StatusBadRequest, "BadRequest", fmt.Errorf("%w: %q", errBadHostname, req.Facts.Hostname)
	}
	// An agent that gave up waiting retries; what was started here is
	// finished (or undone) rather than cut off half-way with its request,
	// which would leave a host no agent holds.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	keyID := pki.KeyID(csr)
	host, err := s.resumedHost(ctx, req, keyID)
	if err != nil {
		return nil, http.StatusInternalServerError, "Internal", err
	}
	if host == nil {
		tok, status, code, err := s.consumeToken(ctx, req.Token)
		if err != nil {
			return nil, status, code, err
		}
		host, err = s.createHost(ctx, tok, req, keyID)
		if err != nil {
			// Refused for what the machine sent, nothing was made: the use
			// goes back to the token. After another failure a host may
			// exist that a retry resumes, so the use stays spent.
			refund := errors.Is(err, errHostExists) || apierrors.IsInvalid(err)
			if refund {
				if rerr := Refund(ctx, s.client, s.apiReader, tok); rerr != nil {
					s.log.Error(rerr, "Giving a use back to a token after a refused enrollment", "tokenID", tok.ID)
				}
			}
			switch {
			case errors.Is(err, errHostExists):
				return nil, http.StatusConflict, "HostExists", err
			case apierrors.IsInvalid(err):
				return nil, http.StatusBadRequest, "BadFacts", fmt.Errorf("the EdgeHost cannot hold these facts: %s", invalidCauses(err))
			}
			return nil, http.StatusInternalServerError, "Internal", err
		}
	}
	id := pki.Identity{Namespace: host.Namespace, Name: host.Name, UID: string(host.UID)}
	cert, err := s.ca.SignClient(req.CSR, id, s.opts.ClientCertValidity)
	if err != nil {
		return nil, http.StatusBadRequest, "BadRequest", fmt.Errorf("csr refused: %w", err)
	}
	return &wire.EnrollResponse{Namespace: host.Namespace, Host: host.Name, UID: host.UID, Certificate: cert}, http.StatusOK, "", nil
}

// consumeToken authenticates the token and counts one use of it.
// Enrollments with one token take turns here: a site's worth of hosts
// booting at once would otherwise all race on the token's usage counter
// at the API server, and most would lose. Striped by token id, so the
// lock table stays small whatever ids callers send.
func (s *Enroller) consumeToken(ctx context.Context, token string) (*enrolltoken.Token, int, string, error) {
	mu := &s.tokenLocks[fnv32(enrolltoken.PublicID(token))%uint32(len(s.tokenLocks))]
	mu.Lock()
	defer mu.Unlock()
	for attempt := 0; ; attempt++ {
		tok, err := Authenticate(ctx, s.apiReader, s.opts.HubNamespace, token, time.Now())
		if err != nil {
			for _, tr := range tokenRefusals {
				if errors.Is(err, tr.err) {
					return nil, http.StatusUnauthorized, "TokenRefused", err
				}
			}
			return nil, http.StatusInternalServerError, "Internal", err
		}
		err = Consume(ctx, s.client, tok)
		if err == nil {
			return tok, http.StatusOK, "", nil
		}
		if !apierrors.IsConflict(err) {
			return nil, http.StatusInternalServerError, "Internal", err
		}
		if attempt == 3 {
			// Many hosts enrolling with one token at once (a site's worth
			// of machines booting): not an error of the host's. It comes
			// back shortly without growing its back-off.
			return nil, http.StatusServiceUnavailable, "Busy", fmt.Errorf("token %s is being used by many hosts at once; retry shortly: %w", tok.ID, err)
		}
	}
}

var errBadHostname = errors.New("hostname cannot be made into an EdgeHost name")

var invalidNameChars = regexp.MustCompile(`[^a-z0-9-]+`)

// hostName turns a hostname into a DNS-1123 label.
func hostName(hostname string) string {
	n := invalidNameChars.ReplaceAllString(strings.ToLower(hostname), "-")
	n = strings.Trim(n, "-")
	if len(n) > 50 {
		n = strings.Trim(n[:50], "-")
	}
	return n
}

var errHostExists = errors.New("this machine already has an EdgeHost")

// createHost creates the EdgeHost for an enrolling machine. It never hands
// out an existing EdgeHost: machine-ids and hostnames are not secrets (and
// are the same on machines cloned from one image), so reusing a host on
// their word would give its identity and bootstrap data to whoever asks.
// Two machines with the same hostname get distinct names; a machine that
// enrolls again while its old EdgeHost exists is refused until an operator
// deletes that EdgeHost.
func (s *Enroller) createHost(ctx context.Context, tok *enrolltoken.Token, req *wire.EnrollRequest, keyID string) (*infrav1.EdgeHost, error) {
	candidates := hostCandidates(req)
	labels := map[string]string{TokenIDLabel: tok.ID}
	for k, v := range tok.HostLabels {
		if enrolltoken.ReservedLabel(k) {
			// A token Secret made by hand; `token create` refuses these.
			s.log.Info("Ignoring a label the token may not set", "tokenID", tok.ID, "label", k)
			continue
		}
		labels[k] = v
	}
	if tok.ApprovalRequired {
		labels[infrav1.ApprovalLabel] = infrav1.ApprovalPending
	}
	for _, name := range candidates {
		h := &infrav1.EdgeHost{ObjectMeta: metav1.ObjectMeta{Namespace: tok.HostNamespace, Name: name, Labels: labels,
			Annotations: map[string]string{infrav1.EnrollmentKeyAnnotation: keyID, infrav1.ClientKeyAnnotation: keyID}}}
		if err := s.client.Create(ctx, h); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Another attempt of this same enrollment (the agent gave
				// up waiting on this one and asked again) got there first:
				// one host for both, not a second one nobody holds.
				if same := s.sameEnrollment(ctx, tok, name, keyID); same != nil {
					return same, nil
				}
				continue
			}
			return nil, fmt.Errorf("creating EdgeHost %s: %w", name, err)
		}
		if err := s.reportFacts(ctx, h, req); err != nil {
			// Do not leave a host without facts (and without an agent
			// holding its certificate) looking Available.
			_ = s.client.Delete(ctx, h)
			return nil, err
		}
		return h, nil
	}
	return nil, fmt.Errorf("%w: EdgeHosts %s/%s exist; if this machine was reinstalled, delete the old EdgeHost and enroll again",
		errHostExists, tok.HostNamespace, strings.Join(candidates, " and "))
}

// sameEnrollment returns host name if an attempt of the same enrollment
// (same token, same key) made it and no agent has connected as it yet.
func (s *Enroller) sameEnrollment(ctx context.Context, tok *enrolltoken.Token, name, keyID string) *infrav1.EdgeHost {
	h := &infrav1.EdgeHost{}
	if err := s.apiReader.Get(ctx, client.ObjectKey{Namespace: tok.HostNamespace, Name: name}, h); err != nil {
		return nil
	}
	if !resumable(h, tok, keyID) {
		return nil
	}
	return h
}

// resumable tells that h was made by an enrollment with this token and key
// and no agent has connected as it yet.
func resumable(h *infrav1.EdgeHost, tok *enrolltoken.Token, keyID string) bool {
	return h.Annotations[infrav1.EnrollmentKeyAnnotation] == keyID && h.Labels[TokenIDLabel] == tok.ID && h.DeletionTimestamp.IsZero() &&
		meta.FindStatusCondition(h.Status.Conditions, infrav1.AgentConnectedCondition) == nil
}

// hostCandidates are the names an enrolling machine's EdgeHost may get:
// its hostname, then the hostname with a digest of its machine-id.
func hostCandidates(req *wire.EnrollRequest) []string {
	base := hostName(req.Facts.Hostname)
	sum := sha256.Sum256([]byte(req.Facts.MachineID))
	return []string{base, base + "-" + hex.EncodeToString(sum[:3])}
}

// resumedHost finds the host an earlier attempt of this same enrollment
// created, when its answer never reached the agent: same token, same key
// (the agent keeps its enrollment key until it holds an identity), and no
// agent has ever connected as it. Anyone else asking with that key gains
// nothing: the certificate is useless without the private key.
func (s *Enroller) resumedHost(ctx context.Context, req *wire.EnrollRequest, keyID string) (*infrav1.EdgeHost, error) {
	tok, err := Verify(ctx, s.apiReader, s.opts.HubNamespace, req.Token, time.Now())
	if err != nil {
		return nil, nil // refused below, with the right answer
	}
	for _, name := range hostCandidates(req) {
		// From the cache: a retry comes after the agent's 30-s timeout,
		// long after the informer has seen the host its first try made.
		h := &infrav1.EdgeHost{}
		err := s.client.Get(ctx, client.ObjectKey{Namespace: tok.HostNamespace, Name: name}, h)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("looking up EdgeHost %s: %w", name, err)
		}
		if !resumable(h, tok, keyID) {
			continue
		}
		if h.Status.Facts.MachineID == "" {
			if err := s.reportFacts(ctx, h, req); err != nil {
				return nil, err
			}
		}
		s.log.Info("Resuming an enrollment whose answer was lost", "EdgeHost", h.Namespace+"/"+h.Name)
		return h, nil
	}
	return nil, nil
}

func (s *Enroller) reportFacts(ctx context.Context, h *infrav1.EdgeHost, req *wire.EnrollRequest) error {
	patch := client.MergeFrom(h.DeepCopy())
	h.Status.Facts = req.Facts
	h.Status.Addresses = req.Addresses
	if err := s.client.Status().Patch(ctx, h, patch); err != nil {
		return fmt.Errorf("recording facts of EdgeHost %s: %w", h.Name, err)
	}
	return nil
}

// invalidCauses lists what the API server found wrong, without its
// boilerplate.
func invalidCauses(err error) string {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
		return "refused by the API server's validation"
	}
	var causes []string
	for _, c := range status.Status().Details.Causes {
		causes = append(causes, strings.TrimPrefix(c.Field, "status.")+": "+c.Message)
	}
	return strings.Join(causes, "; ")
}
