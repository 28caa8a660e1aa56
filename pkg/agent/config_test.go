package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The config file takes durations as an operator writes them.
func TestLoadConfigFileDurations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("hub: https://hub.example:8443\nresyncInterval: 2s\nmaxBackoff: 1m30s\nkeepAlive: 10s\nlinkInterval: 45s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Hub != "https://hub.example:8443" || c.ResyncInterval != 2*time.Second || c.MaxBackoff != 90*time.Second ||
		c.KeepAlive != 10*time.Second || c.LinkInterval != 45*time.Second {
		t.Errorf("LoadConfigFile = %+v", c)
	}
	for _, bad := range []string{"resyncInterval: soon\n", "resyncIntervall: 2s\n"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadConfigFile(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadConfigFile(%q) = %v, want an error naming the file", bad, err)
		}
	}
}
