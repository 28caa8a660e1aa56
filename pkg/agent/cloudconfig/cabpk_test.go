package cloudconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"k8s.io/utils/ptr"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit"
	"sigs.k8s.io/cluster-api/util/secret"
)

var update = flag.Bool("update", false, "regenerate testdata from Cluster API's own cloud-config generator")

// The golden inputs are produced by CABPK's own generator
// (sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/cloudinit, v1.14.2) with
// every feature fleet-agent runs: files with each encoding, owner,
// permissions and append; bootcmd; pre/post commands; users; ntp.
func cabpkInputs(t *testing.T) map[string][]byte {
	t.Helper()
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.String()
	}
	files := []bootstrapv1.File{
		{Path: "/etc/fleet/plain.conf", Content: "plain {{ ds.meta_data.local_hostname }}\n", Owner: "root:root", Permissions: "0600"},
		{Path: "/etc/fleet/b64.bin", Content: base64.StdEncoding.EncodeToString([]byte("base64 content\n")), Encoding: bootstrapv1.Base64},
		{Path: "/etc/fleet/gzip+b64.txt", Content: base64.StdEncoding.EncodeToString([]byte(gz("gzipped content\n"))), Encoding: bootstrapv1.GzipBase64},
		{Path: "/etc/fleet/appended.txt", Content: "second line\n", Append: ptr.To(true)},
	}
	base := cloudinit.BaseUserData{
		BootCommands:        []string{"echo boot > /run/fleet-bootcmd"},
		PreKubeadmCommands:  []string{"echo pre", "hostnamectl set-hostname {{ ds.meta_data.local_hostname }}"},
		PostKubeadmCommands: []string{"echo post"},
		AdditionalFiles:     files,
		Users: []bootstrapv1.User{{Name: "ops", Gecos: "Operator", Groups: "adm", Shell: "/bin/bash", Sudo: "ALL=(ALL) NOPASSWD:ALL",
			LockPassword: ptr.To(true), SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO7Yt7o7d2 ops@example"}}},
		NTP:               &bootstrapv1.NTP{Enabled: ptr.To(true), Servers: []string{"0.pool.ntp.org", "1.pool.ntp.org"}},
		KubernetesVersion: semver.MustParse("1.36.3"),
	}
	certs := secret.NewCertificatesForInitialControlPlane(&bootstrapv1.ClusterConfiguration{})
	if err := certs.Generate(); err != nil {
		t.Fatal(err)
	}
	initCP, err := cloudinit.NewInitControlPlane(&cloudinit.ControlPlaneInput{
		BaseUserData:         base,
		Certificates:         certs,
		ClusterConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrolPlaneEndpoint: demo.edge.example:6443\n",
		InitConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\nnodeRegistration:\n  name: '{{ ds.meta_data.local_hostname }}'\n" +
			"  kubeletExtraArgs:\n  - name: provider-id\n    value: '{{ ds.meta_data.provider_id }}'\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := cloudinit.NewNode(&cloudinit.NodeInput{
		BaseUserData: cloudinit.BaseUserData{KubernetesVersion: semver.MustParse("1.36.3")},
		JoinConfiguration: "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\nnodeRegistration:\n  name: '{{ ds.meta_data.local_hostname }}'\n" +
			"  kubeletExtraArgs:\n  - name: provider-id\n    value: '{{ ds.meta_data.provider_id }}'\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{"cabpk-init-controlplane.yaml": initCP, "cabpk-join-worker.yaml": worker}
}

func golden(t *testing.T, name string) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, cabpkInputs(t)[name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (regenerate with go test ./pkg/agent/cloudconfig -update)", err)
	}
	return b
}

var md = MetaData{LocalHostname: "store-17", InstanceID: "store-17", ProviderID: "edge://default/store-17"}

func TestParsesCABPKInitControlPlane(t *testing.T) {
	cfg, err := Parse(golden(t, "cabpk-init-controlplane.yaml"), md)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]File{}
	for _, f := range cfg.WriteFiles {
		byPath[f.Path] = f
	}
	for path, want := range map[string]string{
		"/etc/fleet/plain.conf":   "plain store-17\n",
		"/etc/fleet/b64.bin":      "base64 content\n",
		"/etc/fleet/gzip+b64.txt": "gzipped content\n",
		"/etc/fleet/appended.txt": "second line\n",
	} {
		f, ok := byPath[path]
		if !ok {
			t.Fatalf("%s missing from write_files", path)
		}
		got, err := f.Decode()
		if err != nil || string(got) != want {
			t.Errorf("%s decodes to %q (%v), want %q", path, got, err, want)
		}
	}
	if m, _ := byPath["/etc/fleet/plain.conf"].Mode(); m != 0o600 {
		t.Errorf("plain.conf mode %o", m)
	}
	if !byPath["/etc/fleet/appended.txt"].Append {
		t.Error("append lost")
	}
	for _, p := range []string{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key", "/run/kubeadm/kubeadm.yaml"} {
		if _, ok := byPath[p]; !ok {
			t.Errorf("%s missing", p)
		}
	}
	kubeadm, _ := byPath["/run/kubeadm/kubeadm.yaml"].Decode()
	if !strings.Contains(string(kubeadm), "value: 'edge://default/store-17'") || !strings.Contains(string(kubeadm), "name: 'store-17'") {
		t.Errorf("substitutions not applied in kubeadm.yaml:\n%s", kubeadm)
	}
	if len(cfg.BootCmd) != 1 || cfg.BootCmd[0].Shell != "echo boot > /run/fleet-bootcmd" {
		t.Errorf("bootcmd %v", cfg.BootCmd)
	}
	var cmds []string
	for _, c := range cfg.RunCmd {
		cmds = append(cmds, c.String())
	}
	joined := strings.Join(cmds, "\n")
	for _, want := range []string{"echo pre", "hostnamectl set-hostname store-17", "kubeadm init --config /run/kubeadm/kubeadm.yaml",
		"echo success > /run/cluster-api/bootstrap-success.complete", "echo post"} {
		if !strings.Contains(joined, want) {
			t.Errorf("runcmd lacks %q:\n%s", want, joined)
		}
	}
	if len(cfg.Users) != 1 || cfg.Users[0].Name != "ops" || cfg.Users[0].Sudo == "" || len(cfg.Users[0].SSHAuthorizedKeys) != 1 ||
		cfg.Users[0].LockPasswd == nil || !*cfg.Users[0].LockPasswd {
		t.Errorf("users %+v", cfg.Users)
	}
	if cfg.NTP == nil || len(cfg.NTP.Servers) != 2 {
		t.Errorf("ntp %+v", cfg.NTP)
	}
}

func TestParsesCABPKJoinWorker(t *testing.T) {
	cfg, err := Parse(golden(t, "cabpk-join-worker.yaml"), md)
	if err != nil {
		t.Fatal(err)
	}
	var joined []string
	for _, c := range cfg.RunCmd {
		joined = append(joined, c.String())
	}
	if !strings.Contains(strings.Join(joined, "\n"), "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml") {
		t.Errorf("runcmd %v", joined)
	}
}
