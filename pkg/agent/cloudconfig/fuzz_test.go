package cloudconfig

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: the parser must never panic or hang on any bootstrap data.
// The seed corpus (CABPK's own output) runs in `make test`; fuzz it with
//
//	go test ./pkg/agent/cloudconfig -run '^$' -fuzz FuzzParse -fuzztime 10m
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("## template: jinja\n#cloud-config\nwrite_files:\n- {path: /x, content: H4sI, encoding: gz+b64}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, md)
		if err != nil {
			return
		}
		for _, f := range cfg.WriteFiles {
			if _, err := f.Decode(); err != nil {
				t.Fatalf("accepted a file it cannot decode: %v", err)
			}
		}
	})
}
