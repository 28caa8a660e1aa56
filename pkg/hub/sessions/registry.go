package sessions

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
	"github.com/edgefleet/fleet/pkg/hub/hoststatus"
	"github.com/edgefleet/fleet/pkg/hub/identity"
	"github.com/edgefleet/fleet/pkg/pki"
)

// Options configure a Registry.
type Options struct {
	// PushWorkers compute and send desired states for all sessions; a
	// push to a stuck agent holds one for at most the write timeout.
	PushWorkers int
	// LastSeenInterval is how often a session refreshes its host's
	// lastSeenTime.
	LastSeenInterval time.Duration
	// AgentIdleTimeout closes a session that sent nothing for this long.
	AgentIdleTimeout time.Duration
	// Mux is the hub's end of the yamux protocol (hubmux.Kinds; "" is
	// hubmux's own, one goroutine a session).
	Mux string
	// MinAgentProtocol is the oldest protocol version served (0:
	// wire.MinProtocol).
	MinAgentProtocol int
}

// speaks is the range of protocol versions the registry serves.
func (o Options) speaks() wire.ProtocolRange {
	return wire.ProtocolRange{Min: max(o.MinAgentProtocol, wire.MinProtocol), Max: wire.MaxProtocol}
}

// ReachResolver says how a host reaches its cluster's endpoint, from the
// informer cache (see package reach).
type ReachResolver interface {
	For(ctx context.Context, h *infrav1.EdgeHost) *wire.Reach
}

// StageResolver says which Kubernetes versions a host should fetch, from
// the informer cache (see package staging); can tells whether the host's
// agent has a wire capability.
type StageResolver interface {
	For(ctx context.Context, h *infrav1.EdgeHost, can func(capability string) bool) []wire.StageOrder
}

// ReleaseDelivery says which agent release each host must run and
// carries the binaries, and the Kubernetes archives the hub carries (see
// package delivery).
type ReleaseDelivery interface {
	For(ctx context.Context, h *infrav1.EdgeHost) *wire.AgentReleaseOrder
	Serve(ss *Session, req *wire.ReleaseRequest, ordered *wire.AgentReleaseOrder) error
	ServeArchive(ss *Session, req *wire.ReleaseRequest) error
}

// Registry holds this replica's sessions, one per host, and pushes their
// desired states.
type Registry struct {
	opts Options
	// client reads EdgeHosts from the informer cache; apiReader reads
	// what is not cached: bootstrap Secrets.
	client    client.Client
	apiReader client.Reader
	log       logr.Logger
	authority *identity.Authority
	status    *hoststatus.Writer
	reach     ReachResolver
	stage     StageResolver
	releases  ReleaseDelivery

	// pushes holds sessions whose desired state may have changed; the
	// push workers drain it. One session is never pushed by two workers
	// at once.
	pushes workqueue.TypedInterface[*Session]

	mu       sync.Mutex
	sessions map[string]*Session // by "namespace/name"
	// ctx lives as long as the registry runs (Start): sessions run under it.
	ctx context.Context
}

// New returns an empty Registry. SetStatusWriter and SetAuthority must be
// called before Start.
func New(c client.Client, apiReader client.Reader, log logr.Logger, reach ReachResolver, opts Options) *Registry {
	return &Registry{opts: opts, client: c, apiReader: apiReader, log: log, reach: reach,
		sessions: map[string]*Session{}, pushes: workqueue.NewTyped[*Session](), ctx: context.Background()}
}

// SetStageResolver sets where stage orders come from; without one, hosts
// are told to fetch nothing. Call before Start.
func (r *Registry) SetStageResolver(s StageResolver) { r.stage = s }

// SetReleaseDelivery sets where agent release orders and binaries come
// from; without one, agents are ordered to run nothing. Call before Start.
func (r *Registry) SetReleaseDelivery(d ReleaseDelivery) { r.releases = d }

// KickNamespace asks every session of the namespace's hosts to recompute
// its desired state (an EdgeKubernetesRelease there changed).
func (r *Registry) KickNamespace(namespace string) {
	now := time.Now()
	r.mu.Lock()
	var kick []*Session
	for _, ss := range r.sessions {
		if ss.id.Namespace == namespace {
			kick = append(kick, ss)
		}
	}
	r.mu.Unlock()
	for _, ss := range kick {
		ss.kickPush(now)
	}
}

// RecordUnsupported records on id's EdgeHost that its agent was refused
// for sharing no protocol version with this hub.
func (r *Registry) RecordUnsupported(ctx context.Context, id pki.Identity, reason, message string) {
	if r.status != nil {
		r.status.Unsupported(ctx, id, reason, message)
	}
}

// SetStatusWriter sets where sessions record their hosts' status (the
// writer itself looks sessions up here).
func (r *Registry) SetStatusWriter(w *hoststatus.Writer) { r.status = w }

// SetAuthority sets who authenticates and rotates identities (the hub CA
// is loaded only once the gateway starts).
func (r *Registry) SetAuthority(a *identity.Authority) { r.authority = a }

// Start pushes desired states until ctx ends, then closes every session;
// the channel it returns is closed once that is done. Sessions served from
// now on run under ctx.
func (r *Registry) Start(ctx context.Context) <-chan struct{} {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	var workers sync.WaitGroup
	for range max(r.opts.PushWorkers, 1) {
		workers.Go(r.pushWorker)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		r.pushes.ShutDown()
		workers.Wait()
		r.mu.Lock()
		all := make([]*Session, 0, len(r.sessions))
		for _, ss := range r.sessions {
			all = append(all, ss)
		}
		r.mu.Unlock()
		for _, ss := range all {
			ss.Close()
		}
	}()
	return done
}

// Lookup is the session this replica holds for the host, or nil.
func (r *Registry) Lookup(namespace, name string) *Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[namespace+"/"+name]
}

// Current is Lookup for hoststatus.
func (r *Registry) Current(namespace, name string) hoststatus.Session {
	if ss := r.Lookup(namespace, name); ss != nil {
		return ss
	}
	return nil
}

// Serve registers a session whose handshake is done and serves it from
// now on; a session of the same host it replaces is closed.
func (r *Registry) Serve(ss *Session) {
	r.mu.Lock()
	ctx := r.ctx
	old := r.sessions[ss.id.String()]
	r.sessions[ss.id.String()] = ss
	r.mu.Unlock()
	r.status.Returned(ss.id)
	if old != nil {
		// The agent reconnected before the old session timed out.
		old.replaced.Store(true)
		old.Close()
	} else {
		connectedAgents.Inc()
	}
	// The desired state first: recording the connection (the session's
	// handler does it) is an API write that may wait its turn behind
	// thousands of others after a restart.
	ss.kickPush(time.Now())
	if ctx.Err() != nil {
		// The hub is stopping: the sessions it knew of were closed before
		// this one registered.
		r.unregister(ss)
		return
	}
	ss.start(ctx)
}

func (r *Registry) unregister(ss *Session) {
	ss.Close()
	r.mu.Lock()
	current := r.sessions[ss.id.String()] == ss
	if current {
		delete(r.sessions, ss.id.String())
	}
	ctx := r.ctx
	r.mu.Unlock()
	if current {
		connectedAgents.Dec()
		r.status.DisconnectLater(ctx, ss)
	}
}

// Kick asks the host's session, if any, to recompute its desired state.
func (r *Registry) Kick(namespace, name string, seen time.Time) {
	if ss := r.Lookup(namespace, name); ss != nil {
		ss.kickPush(seen)
	}
}

// HostChanged pushes the new desired state to the host's session, if any,
// or cuts the session off if the host no longer trusts it.
func (r *Registry) HostChanged(obj any) {
	h, ok := obj.(*infrav1.EdgeHost)
	if !ok {
		return
	}
	ss := r.Lookup(h.Namespace, h.Name)
	if ss == nil {
		return
	}
	switch err := identity.Trust(h, ss.Peer()); {
	case errors.Is(err, identity.ErrReplaced):
		go r.closeIfReplaced(ss)
		return
	case err != nil:
		// Not on the informer's goroutine: telling a stuck peer may block
		// for a write timeout.
		go ss.distrusted(err)
		return
	}
	ss.kickPush(time.Now())
}

// HostDeleted cuts a deleted host off.
func (r *Registry) HostDeleted(obj any) {
	h, ok := obj.(*infrav1.EdgeHost)
	if !ok {
		if tomb, isTomb := obj.(toolscache.DeletedFinalStateUnknown); isTomb {
			h, ok = tomb.Obj.(*infrav1.EdgeHost)
		}
		if !ok {
			return
		}
	}
	if ss := r.Lookup(h.Namespace, h.Name); ss != nil {
		if _, moving := h.Annotations[clusterctlv1.DeleteForMoveAnnotation]; moving {
			go ss.moved()
		} else {
			go ss.revoke()
		}
	}
	r.status.Forget(h.Namespace, h.Name)
}

// closeIfReplaced closes the session if the API server confirms what the
// cache said, that its key is no longer the host's: an informer event older
// than a rotation made on this very session must not close it.
func (r *Registry) closeIfReplaced(ss *Session) {
	switch err := r.authority.Confirm(context.Background(), ss.Peer()); {
	case errors.Is(err, identity.ErrReplaced):
		r.log.Info("Closing a session whose certificate was replaced", "EdgeHost", ss.id.String())
		ss.Close()
	case errors.Is(err, identity.ErrRevoked):
		ss.revoke()
	}
}

// pushWorker pushes desired states until the queue shuts down.
func (r *Registry) pushWorker() {
	for {
		ss, shutdown := r.pushes.Get()
		if shutdown {
			return
		}
		retry := ss.push()
		r.pushes.Done(ss)
		if retry {
			// An error reading the cache or the bootstrap Secret must not
			// leave the agent without its desired state until the next
			// host event.
			time.AfterFunc(2*time.Second, func() {
				select {
				case <-ss.done:
				default:
					r.pushes.Add(ss)
				}
			})
		}
	}
}
