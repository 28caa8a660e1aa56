package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// samples has one message of every type; each has a golden file.
func samples() map[string]any {
	expiry := metav1.NewTime(time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC))
	return map[string]any{
		"hello": &Hello{AgentVersion: "v0.1.0", Host: "store-0042", ObservedGeneration: 3},
		"hello-protocols": &Hello{AgentVersion: "v0.2.0", Host: "store-0042", ObservedGeneration: 3,
			Capabilities: []string{CapabilityTunnel}, Protocols: &ProtocolRange{Min: 1, Max: 2}},
		"welcome": &Welcome{HubVersion: "v0.2.0"},
		"desiredstate-assignment": &DesiredState{Generation: 4, Assignment: &Assignment{
			ClaimUID: "0b4f8a9e-1f0e-4a55-9d7f-6a4b0a2b3c4d", MachineName: "demo-md-0-x7k2p",
			ProviderID: "edge://default/store-0042", BootstrapFormat: "cloud-config",
			BootstrapData: []byte("## template: jinja\n#cloud-config\nruncmd:\n- kubeadm join\n"),
		}},
		"desiredstate-deprovision": &DesiredState{Generation: 5, Deprovision: true},
		"desiredstate-hostuid": &DesiredState{Generation: 2, HostUID: "5d1c7e0a-3b9f-4c2e-8a61-2f4e9b7d0c13", Assignment: &Assignment{
			ClaimUID: "0b4f8a9e-1f0e-4a55-9d7f-6a4b0a2b3c4d", MachineName: "demo-md-0-x7k2p",
			ProviderID: "edge://default/store-0042", BootstrapFormat: "cloud-config",
			BootstrapData: []byte("#cloud-config\n"),
		}},
		"desiredstate-nothing": &DesiredState{Generation: 1},
		"desiredstate-agentrelease": &DesiredState{Generation: 1, AgentRelease: &AgentReleaseOrder{Version: "v0.9.2",
			Bundle: []byte(`{"apiVersion":"release.fleet.edgefleet.io/v1"}`), SHA256: strings.Repeat("ab", 32), Size: 12448009, TrialSeconds: 300}},
		"desiredstate-stage": &DesiredState{Generation: 1, Stage: []StageOrder{
			{Version: "v1.36.3", URL: "https://releases.example.com/kubernetes-v1.36.3-amd64.tar.gz", SHA256: strings.Repeat("cd", 32)},
			{Version: "v1.37.0", SHA256: strings.Repeat("ef", 32), Hub: true}}},
		"desiredstate-stage-oci": &DesiredState{Generation: 1, Stage: []StageOrder{
			{Version: "v1.36.3", URL: "oci://registry.example.com/edge/kubernetes:v1.36.3", SHA256: strings.Repeat("cd", 32)}}},
		"releaserequest": &ReleaseRequest{SHA256: strings.Repeat("ab", 32), Offset: 6258688},
		"releasedata":    &ReleaseData{SHA256: strings.Repeat("ab", 32), Offset: 6258688, Size: 12448009},
		"status": &Status{
			ObservedGeneration: 4,
			Facts: infrav1.HostFacts{Hostname: "store-0042", MachineID: "9f86d081884c7d659a2feaa0c55ad015",
				OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", CPUs: 4, MemoryBytes: 8 << 30, AgentVersion: "v0.1.0"},
			Addresses: infrav1.MachineAddresses{{Type: infrav1.MachineInternalIP, Address: "192.168.1.20"},
				{Type: infrav1.MachineHostName, Address: "store-0042"}},
			Provisioning: &infrav1.HostProvisioningStatus{ClaimUID: "0b4f8a9e-1f0e-4a55-9d7f-6a4b0a2b3c4d",
				State: infrav1.ProvisioningSucceeded, Step: "runcmd 7/7"},
			ProviderID: "edge://default/store-0042", NodeName: "store-0042", CertificatesExpiryDate: &expiry,
		},
		"certificaterequest": &CertificateRequest{CSR: []byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB...\n-----END CERTIFICATE REQUEST-----\n")},
		"certificate":        &Certificate{Certificate: []byte("-----BEGIN CERTIFICATE-----\nMIIC...\n-----END CERTIFICATE-----\n")},
		"error":              &Error{Code: ErrRevoked, Message: "EdgeHost default/store-0042 was deleted; enroll again"},
		"error-unknownhost": &Error{Code: ErrUnknownHost,
			Message: "the hub has no EdgeHost default/store-0042: keep the identity and retry (restore the EdgeHost if the hub was restored from a backup)"},
	}
}

// Every message type encodes to its golden file and decodes back to itself,
// so a change to the wire format shows up as a diff in review.
func TestGoldenFixtures(t *testing.T) {
	for name, msg := range samples() {
		t.Run(name, func(t *testing.T) {
			typ, err := TypeOf(msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := EncodeAs(Since(typ), msg)
			if err != nil {
				t.Fatal(err)
			}
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, got, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", name+".json")
			if *update {
				if err := os.WriteFile(path, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/contract/wire -update)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("encoding changed:\n got %s\nwant %s", pretty.Bytes(), want)
			}
			decoded, err := Decode(want)
			if err != nil {
				t.Fatalf("decoding golden file: %v", err)
			}
			if !equality.Semantic.DeepEqual(decoded, msg) {
				t.Errorf("round trip:\n got %#v\nwant %#v", decoded, msg)
			}
		})
	}
}

func TestDecodeRefusals(t *testing.T) {
	tests := []struct {
		name  string
		frame string
		code  ErrorCode
	}{
		{"not json", `{"protocol":`, ErrBadFrame},
		{"other protocol", `{"protocol":"fleet.edgefleet.io/v0","type":"Hello","payload":{}}`, ErrUnsupportedProtocol},
		{"unknown type", `{"protocol":"fleet.edgefleet.io/v1","type":"Exec","payload":{"cmd":"rm -rf /"}}`, ErrUnknownType},
		{"no payload", `{"protocol":"fleet.edgefleet.io/v1","type":"Status"}`, ErrBadFrame},
		{"null payload", `{"protocol":"fleet.edgefleet.io/v1","type":"Status","payload":null}`, ErrBadFrame},
		{"wrong payload shape", `{"protocol":"fleet.edgefleet.io/v1","type":"Hello","payload":{"observedGeneration":"x"}}`, ErrBadFrame},
		{"negative generation", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":-1}}`, ErrBadFrame},
		{"assignment and deprovision", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"deprovision":true,"assignment":{"claimUID":"u","bootstrapData":"eA=="}}}`, ErrBadFrame},
		{"assignment without data", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"assignment":{"claimUID":"u"}}}`, ErrBadFrame},
		{"provisioning without claim", `{"protocol":"fleet.edgefleet.io/v1","type":"Status","payload":{"provisioning":{"state":"Provisioned"}}}`, ErrBadFrame},
		{"stage version with a path", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3/../../../etc","url":"https://m/a","sha256":"%[1]s"}]}}`, ErrBadFrame},
		{"stage without a checksum", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3","url":"https://m/a","sha256":"abc"}]}}`, ErrBadFrame},
		{"renewal window past kubeadm's longest validity", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"assignment":{"claimUID":"u","bootstrapData":"eA==","certificatesRenewBeforeDays":1096}}}`, ErrBadFrame},
		{"renewal without a state", `{"protocol":"fleet.edgefleet.io/v1","type":"Status","payload":{"observedGeneration":1,"facts":{},"certificatesRenewal":{"startTime":"2026-12-07T00:00:00Z","step":"x"}}}`, ErrBadFrame},
		{"stage through the hub with a url", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3","url":"https://m/a","sha256":"%[1]s","hub":true}]}}`, ErrBadFrame},
		{"stage without a url", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3","sha256":"%[1]s"}]}}`, ErrBadFrame},
		{"release data past the bound", `{"protocol":"fleet.edgefleet.io/v1","type":"ReleaseData","payload":{"sha256":"%[1]s","offset":0,"size":8589934593}}`, ErrBadFrame},
		{"stage from a registry without a repository", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3","url":"oci://registry.example.com","sha256":"%[1]s"}]}}`, ErrBadFrame},
		{"stage from a file", `{"protocol":"fleet.edgefleet.io/v1","type":"DesiredState","payload":{"generation":2,"stage":[{"version":"v1.36.3","url":"file:///etc/shadow","sha256":"%[1]s"}]}}`, ErrBadFrame},
		{"staging without a state", `{"protocol":"fleet.edgefleet.io/v1","type":"Status","payload":{"staging":[{"version":"v1.36.3"}]}}`, ErrBadFrame},
		{"error without code", `{"protocol":"fleet.edgefleet.io/v1","type":"Error","payload":{"message":"x"}}`, ErrBadFrame},
		{"a version not spoken", `{"protocol":"fleet.edgefleet.io/v9","type":"Status","payload":{}}`, ErrUnsupportedProtocol},
		{"another group", `{"protocol":"example.com/v1","type":"Hello","payload":{}}`, ErrUnsupportedProtocol},
		{"a version with a leading zero", `{"protocol":"fleet.edgefleet.io/v01","type":"Hello","payload":{}}`, ErrUnsupportedProtocol},
		{"Welcome in version 1", `{"protocol":"fleet.edgefleet.io/v1","type":"Welcome","payload":{"hubVersion":"v1"}}`, ErrUnexpected},
		{"protocols upside down", `{"protocol":"fleet.edgefleet.io/v1","type":"Hello","payload":{"protocols":{"min":3,"max":2}}}`, ErrBadFrame},
		{"protocols from zero", `{"protocol":"fleet.edgefleet.io/v1","type":"Hello","payload":{"protocols":{"min":0,"max":2}}}`, ErrBadFrame},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(strings.ReplaceAll(tt.frame, "%[1]s", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")))
			var we *Error
			if !errors.As(err, &we) || we.Code != tt.code {
				t.Fatalf("Decode() error %v, want code %s", err, tt.code)
			}
		})
	}
	big := make([]byte, MaxFrameSize+1)
	var we *Error
	if _, err := Decode(big); !errors.As(err, &we) || we.Code != ErrFrameTooLarge {
		t.Errorf("oversized frame: %v", err)
	}
}

// Hello and Error read in any version, so releases that share none can
// still say why; other messages only in a version this side speaks.
func TestFrozenMessagesReadInAnyVersion(t *testing.T) {
	for _, frame := range []string{
		`{"protocol":"fleet.edgefleet.io/v9","type":"Hello","payload":{"host":"h","protocols":{"min":8,"max":9}}}`,
		`{"protocol":"fleet.edgefleet.io/v9","type":"Error","payload":{"code":"UnsupportedProtocol","message":"x"}}`,
	} {
		msg, v, err := DecodeVersion([]byte(frame))
		if err != nil || v != 9 {
			t.Errorf("DecodeVersion(%s) = %T, %d, %v; want version 9", frame, msg, v, err)
		}
	}
	if _, err := EncodeAs(MaxProtocol+1, &Status{}); err == nil {
		t.Error("a Status was written in a version this release does not speak")
	}
	if _, err := EncodeAs(1, &Welcome{}); err == nil {
		t.Error("a Welcome was written in version 1, which has none")
	}
	b, err := EncodeAs(MaxProtocol+7, &Error{Code: ErrUnsupportedProtocol, Message: "x"})
	if err != nil || !strings.Contains(string(b), ProtocolName(MaxProtocol+7)) {
		t.Errorf("an Error in a later version: %s %v", b, err)
	}
}

func TestNegotiate(t *testing.T) {
	for _, tt := range []struct {
		a, b ProtocolRange
		want int
		ok   bool
	}{
		{ProtocolRange{1, 2}, ProtocolRange{1, 1}, 1, true},
		{ProtocolRange{1, 2}, ProtocolRange{1, 3}, 2, true},
		{ProtocolRange{2, 3}, ProtocolRange{1, 1}, 0, false},
		{ProtocolRange{1, 1}, ProtocolRange{2, 4}, 0, false},
		{ProtocolRange{2, 4}, ProtocolRange{3, 9}, 4, true},
	} {
		v, ok := Negotiate(tt.a, tt.b)
		if ok != tt.ok || ok && v != tt.want {
			t.Errorf("Negotiate(%v, %v) = %d, %v; want %d, %v", tt.a, tt.b, v, ok, tt.want, tt.ok)
		}
		if w, ok2 := Negotiate(tt.b, tt.a); ok2 != ok || w != v {
			t.Errorf("Negotiate is not symmetric for %v, %v", tt.a, tt.b)
		}
	}
}

// shrinkCounter is a stream that can give back its receive buffer.
type shrinkCounter struct {
	*bytes.Buffer
	shrunk int
}

func (s *shrinkCounter) Shrink() { s.shrunk++ }

// Each frame read lets the stream give back its buffer: an idle session
// would otherwise hold one as large as the largest frame it ever received.
func TestReadFrameShrinksTheStream(t *testing.T) {
	r := &shrinkCounter{Buffer: &bytes.Buffer{}}
	for _, f := range []string{"one", "two"} {
		if err := WriteFrame(r.Buffer, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"one", "two"} {
		got, err := ReadFrame(r, 16)
		if err != nil || string(got) != want {
			t.Fatalf("ReadFrame() = %q, %v; want %q", got, err, want)
		}
		if r.shrunk != i+1 {
			t.Errorf("after frame %d the stream was shrunk %d times, want %d", i+1, r.shrunk, i+1)
		}
	}
	// A frame refused or cut short is not a frame read.
	r.Write([]byte{0, 0, 0, 9, 'x'})
	if _, err := ReadFrame(r, 16); err == nil || r.shrunk != 2 {
		t.Errorf("a short frame: err %v, shrunk %d times, want an error and 2", err, r.shrunk)
	}
}

func TestFraming(t *testing.T) {
	var buf bytes.Buffer
	for _, f := range [][]byte{[]byte("one"), []byte(""), []byte("three")} {
		if err := WriteFrame(&buf, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"one", "", "three"} {
		got, err := ReadFrame(&buf, 16)
		if err != nil || string(got) != want {
			t.Fatalf("ReadFrame() = %q, %v; want %q", got, err, want)
		}
	}
	// A header announcing 4 GiB is refused before anything is allocated.
	if _, err := ReadFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}), MaxFrameSize); !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge announced frame: %v", err)
	}
	if err := WriteFrame(&buf, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("writing oversized frame: %v", err)
	}
	if _, err := Encode(struct{}{}); err == nil {
		t.Error("Encode accepted a non-message")
	}
}
