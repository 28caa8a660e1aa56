package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/types"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

// HTTP paths of the hub gateway.
const (
	PathCA      = "/v1/ca"
	PathEnroll  = "/v1/enroll"
	PathConnect = "/v1/connect"
)

// MaxEnrollRequestSize bounds the body of an enrollment request.
const MaxEnrollRequestSize = 64 << 10

// EnrollRequest is POSTed to PathEnroll, over TLS to a hub whose CA the
// agent has pinned.
type EnrollRequest struct {
	// Token is "<id>.<secret>".
	Token string `json:"token"`
	// CSR is a PEM PKCS#10 request for a key made on the host.
	CSR []byte `json:"csr"`
	// Facts about the machine; hostname and machineID are required.
	Facts infrav1.HostFacts `json:"facts"`
	// Addresses of the machine.
	Addresses infrav1.MachineAddresses `json:"addresses,omitempty"`
}

// EnrollResponse is the identity the hub gave the host.
type EnrollResponse struct {
	Namespace string    `json:"namespace"`
	Host      string    `json:"host"`
	UID       types.UID `json:"uid"`
	// Certificate is the PEM client certificate for the CSR's key.
	Certificate []byte `json:"certificate"`
}

// MaxEnrollAddresses bounds the addresses an enrollment may report.
const MaxEnrollAddresses = 128

// Validate checks an enrollment request against what an EdgeHost can hold
// (the CRD's bounds), so a request the API server would refuse is refused
// before it spends a use of its token.
func (r *EnrollRequest) Validate() error {
	f := r.Facts
	switch {
	case f.Hostname == "" || f.MachineID == "" || len(r.CSR) == 0:
		return errors.New("enrollment request needs facts.hostname, facts.machineID and csr")
	case len(f.Hostname) > 253:
		return fmt.Errorf("facts.hostname is %d characters, at most 253", len(f.Hostname))
	case len(f.MachineID) > 64:
		return fmt.Errorf("facts.machineID is %d characters, at most 64", len(f.MachineID))
	case len(f.OS) > 256:
		return fmt.Errorf("facts.os is %d characters, at most 256", len(f.OS))
	case len(f.Arch) > 32:
		return fmt.Errorf("facts.arch is %d characters, at most 32", len(f.Arch))
	case len(f.AgentVersion) > 64:
		return fmt.Errorf("facts.agentVersion is %d characters, at most 64", len(f.AgentVersion))
	case f.CPUs < 0 || f.MemoryBytes < 0:
		return errors.New("facts.cpus and facts.memoryBytes must not be negative")
	case len(r.Addresses) > MaxEnrollAddresses:
		return fmt.Errorf("%d addresses, at most %d", len(r.Addresses), MaxEnrollAddresses)
	}
	for i, a := range r.Addresses {
		switch a.Type {
		case infrav1.MachineHostName, infrav1.MachineExternalIP, infrav1.MachineInternalIP, infrav1.MachineExternalDNS, infrav1.MachineInternalDNS:
		default:
			return fmt.Errorf("addresses[%d].type %q is not an address type", i, a.Type)
		}
		if a.Address == "" || len(a.Address) > 256 {
			return fmt.Errorf("addresses[%d].address must be 1 to 256 characters", i)
		}
	}
	return nil
}

// Refusal is the JSON body of every refusal of the hub's gateway (an
// enrollment or a session it will not take): a machine-readable code and
// a message for people.
type Refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Write sends the refusal with HTTP status status.
func (r Refusal) Write(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(r)
}
