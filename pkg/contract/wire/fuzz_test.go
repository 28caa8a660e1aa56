package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// FuzzDecode feeds arbitrary frames to the decoder: it must never panic,
// and whatever it accepts must survive an encode/decode round trip. The seed
// corpus (the golden fixtures) runs on every `go test`; run it for real with
//
//	go test ./pkg/contract/wire -run '^$' -fuzz FuzzDecode -fuzztime 10m
func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"protocol":"fleet.edgefleet.io/v1","type":"Status","payload":{"addresses":[{}]}}`))
	f.Add([]byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, frame []byte) {
		msg, v, err := DecodeVersion(frame)
		if err != nil {
			return
		}
		again, err := EncodeAs(v, msg)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", frame, err)
		}
		msg2, v2, err := DecodeVersion(again)
		if err != nil || v2 != v {
			t.Fatalf("re-encoded %q does not decode in version %d: %d, %v", again, v, v2, err)
		}
		if !equality.Semantic.DeepEqual(msg, msg2) && !bytes.Equal(again, mustEncode(t, v, msg2)) {
			t.Fatalf("round trip changed the message: %#v vs %#v", msg, msg2)
		}
	})
}

func mustEncode(t *testing.T, v int, msg any) []byte {
	t.Helper()
	b, err := EncodeAs(v, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
