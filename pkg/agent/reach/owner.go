package reach

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
	"github.com/edgefleet/fleet/pkg/contract/wire"
)

// Owner owns this host's reach: the cluster endpoint the hub last gave
// (the only target tunnels may dial) and the block of the hosts file that
// resolves it at the site.
type Owner struct {
	hostsFile string
	log       logr.Logger

	current atomic.Pointer[wire.Reach]

	mu sync.Mutex
	// The managed hosts block last written, and the assignment whose
	// endpoint reach is held to.
	hostsBlock     []byte
	hostsWritten   bool
	pinnedClaim    types.UID
	pinnedEndpoint string
}

// NewOwner makes the owner of the reach of the host whose root directory
// is root (its hosts file is root/etc/hosts).
func NewOwner(root string, log logr.Logger) *Owner {
	return &Owner{hostsFile: filepath.Join(root, "etc", "hosts"), log: log}
}

// Current is the reach in force (nil while the host belongs to no cluster).
func (o *Owner) Current() *wire.Reach { return o.current.Load() }

// Restore holds the endpoint given with the assignment of d, the desired
// state acted on before a restart: it holds across restarts.
func (o *Owner) Restore(d *wire.DesiredState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pin(d)
}

// Set takes the hub's word on the cluster endpoint from a desired state:
// it is the only target tunnels may dial, and a name in fleet's own zone
// must resolve at the site to the cluster's API server (kubeadm and the
// kubelet dial it too), so the managed hosts entry is brought up to date
// before the bootstrap that needs it runs. A write that failed is tried
// again with the next desired state.
//
// The endpoint is held to the one given with the assignment: Cluster API
// never moves a cluster's controlPlaneEndpoint once set, so a hub that
// re-aims it without a new assignment is not to be followed (only the
// addresses the name resolves to may change, as control-plane hosts come
// and go).
func (o *Owner) Set(d *wire.DesiredState) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.pin(d)
	if !wire.SameReach(o.current.Load(), r) {
		o.current.Store(r)
		if r == nil {
			o.log.Info("Cluster endpoint forgotten: the host belongs to no cluster")
		} else {
			o.log.Info("Cluster endpoint", "endpoint", r.Endpoint, "addresses", r.Addresses, "tunnels", r.Tunnels)
		}
	}
	block := hostsBlock(r)
	if o.hostsWritten && bytes.Equal(block, o.hostsBlock) {
		return
	}
	if err := writeHostsEntry(o.hostsFile, block); err != nil {
		o.hostsWritten = false
		o.log.Error(err, "Updating the cluster endpoint's hosts entry; trying again with the next desired state")
		return
	}
	o.hostsBlock, o.hostsWritten = block, true
}

// pin returns the reach to apply for d, under mu: none without an
// assignment; for an assignment, the endpoint first given with it, and a
// reach that names another endpoint is refused (the last one stays).
func (o *Owner) pin(d *wire.DesiredState) *wire.Reach {
	if d == nil || d.Assignment == nil {
		o.pinnedClaim, o.pinnedEndpoint = "", ""
		return nil
	}
	r := d.Reach
	if d.Assignment.ClaimUID != o.pinnedClaim {
		o.pinnedClaim, o.pinnedEndpoint = d.Assignment.ClaimUID, ""
	}
	switch {
	case r == nil:
		return nil
	case o.pinnedEndpoint == "":
		o.pinnedEndpoint = r.Endpoint
		return r
	case r.Endpoint != o.pinnedEndpoint:
		o.log.Info("Refusing a cluster endpoint the hub changed without a new assignment; keeping the one given with it",
			"kept", o.pinnedEndpoint, "refused", r.Endpoint, "machine", d.Assignment.MachineName)
		if cur := o.current.Load(); cur != nil && cur.Endpoint == o.pinnedEndpoint {
			return cur
		}
		return nil
	}
	return r
}

// DialTargets checks a tunnel target against the cluster this host belongs
// to and returns the addresses to dial for it. Anything but the cluster's
// own API endpoint is refused: the hub must never be able to use an agent
// to reach the rest of the site's network.
func (o *Owner) DialTargets(target string) ([]string, error) {
	r := o.current.Load()
	if r == nil {
		return nil, errors.New("this host belongs to no cluster; it dials nothing")
	}
	if !r.Tunnels {
		return nil, errors.New("edge reach is disabled for this host's cluster")
	}
	if target != r.Endpoint {
		return nil, fmt.Errorf("target %q is not this host's cluster endpoint", target)
	}
	host, port, err := net.SplitHostPort(r.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("cluster endpoint %q: %w", r.Endpoint, err)
	}
	if !managedName(host) || len(r.Addresses) == 0 {
		// An address, or a name the site's own DNS answers for.
		return []string{r.Endpoint}, nil
	}
	out := make([]string, 0, len(r.Addresses))
	for _, ip := range r.Addresses {
		out = append(out, net.JoinHostPort(ip, port))
	}
	return out, nil
}

// managedName tells whether host is in fleet's own endpoint zone, which
// only the agents resolve.
func managedName(host string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), "."+infrav1.EndpointDomain)
}
