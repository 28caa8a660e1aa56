package edgemachine

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateBootstrapSecret(t *testing.T) {
	tests := []struct {
		name string
		data map[string][]byte
		want string // substring of the refusal, "" for accepted
	}{
		{"cloud-config", map[string][]byte{"value": []byte("#cloud-config"), "format": []byte("cloud-config")}, ""},
		{"no format key (older providers)", map[string][]byte{"value": []byte("#cloud-config")}, ""},
		{"no value", map[string][]byte{"format": []byte("cloud-config")}, `no data under key "value"`},
		{"empty value", map[string][]byte{"value": {}}, `no data under key "value"`},
		{"ignition", map[string][]byte{"value": []byte("{}"), "format": []byte("ignition")}, "ignition format"},
		{"unknown format", map[string][]byte{"value": []byte("x"), "format": []byte("talos")}, `unknown format "talos"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := validateBootstrapSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: tt.data})
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("validateBootstrapSecret() = %q, want %q", got, tt.want)
			}
		})
	}
}
