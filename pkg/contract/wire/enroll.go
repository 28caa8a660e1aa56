package wire

import (
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
