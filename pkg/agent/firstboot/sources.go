package firstboot

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The kernel command line's fleet settings.
const (
	argHub      = "fleet.hub"
	argPin      = "fleet.ca-cert-hash"
	argToken    = "fleet.token"
	argHostname = "fleet.hostname"
)

// parseCmdline reads fleet.hub=, fleet.ca-cert-hash=, fleet.token= and
// fleet.hostname= from a kernel command line (values cannot hold spaces;
// none of these needs any). Other fleet.* words are refused: a typo must
// not leave a box silently unconfigured.
func parseCmdline(cmdline string) (seed, error) {
	s := seed{source: "kernel command line"}
	for _, word := range strings.Fields(cmdline) {
		if !strings.HasPrefix(word, "fleet.") {
			continue
		}
		k, v, _ := strings.Cut(word, "=")
		v = strings.Trim(v, `"`)
		switch k {
		case argHub:
			s.hub = v
		case argPin:
			s.pin = strings.ToLower(v)
		case argToken:
			s.token = v
		case argHostname:
			s.hostname = v
		default:
			return s, fmt.Errorf("kernel command line: unknown setting %s (known: %s, %s, %s, %s)", k, argHub, argPin, argToken, argHostname)
		}
	}
	return s, nil
}

// userData is the part of a #cloud-config that fleet's image honours
// without cloud-init: the hostname and files written to /etc/fleet-agent.
type userData struct {
	Hostname   string `json:"hostname"`
	WriteFiles []struct {
		Path     string `json:"path"`
		Content  string `json:"content"`
		Encoding string `json:"encoding"`
	} `json:"write_files"`
}

// metaData is NoCloud's meta-data; local-hostname names the box.
type metaData struct {
	LocalHostname string `json:"local-hostname"`
}

// readNoCloud reads a NoCloud seed: user-data's write_files for
// /etc/fleet-agent/config.yaml and /etc/fleet-agent/token, and the
// hostname from user-data or meta-data. The rest of the seed is for
// cloud-init, which an image adds as a site package when it needs it.
func readNoCloud(dir string) (seed, error) {
	s := seed{source: "NoCloud seed " + NoCloudLabel}
	ud, err := readBounded(filepath.Join(dir, "user-data"))
	if err != nil {
		return s, err
	}
	if ud != nil {
		if !strings.HasPrefix(string(ud), "#cloud-config") {
			return s, fmt.Errorf("user-data does not start with #cloud-config")
		}
		var u userData
		if err := yaml.Unmarshal(ud, &u); err != nil {
			return s, fmt.Errorf("user-data: %w", err)
		}
		s.hostname = u.Hostname
		for _, f := range u.WriteFiles {
			var content []byte
			switch f.Encoding {
			case "", "text/plain":
				content = []byte(f.Content)
			case "b64", "base64":
				if content, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
					return s, fmt.Errorf("user-data: write_files %s: %w", f.Path, err)
				}
			default:
				return s, fmt.Errorf("user-data: write_files %s: encoding %q (fleet's image reads plain text and b64)", f.Path, f.Encoding)
			}
			switch filepath.Clean(f.Path) {
			case "/" + ConfigPath:
				s.config = content
			case "/" + TokenPath:
				s.token = strings.TrimSpace(string(content))
			}
		}
	}
	md, err := readBounded(filepath.Join(dir, "meta-data"))
	if err != nil {
		return s, err
	}
	if md != nil && s.hostname == "" {
		var m metaData
		if err := yaml.Unmarshal(md, &m); err != nil {
			return s, fmt.Errorf("meta-data: %w", err)
		}
		s.hostname = m.LocalHostname
	}
	return s, nil
}
