package cloudconfig

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// MaxSize bounds the cloud-config accepted (CABPK's are tens of KiB).
const MaxSize = 1 << 20

// maxDecoded bounds one decoded file, so a gzip bomb cannot exhaust memory.
const maxDecoded = 16 << 20

// MetaData are the values {{ ds.meta_data.<key> }} expands to.
type MetaData struct {
	LocalHostname string
	InstanceID    string
	ProviderID    string
}

// Config is a parsed cloud-config.
type Config struct {
	WriteFiles []File    `json:"write_files,omitempty"`
	BootCmd    []Command `json:"bootcmd,omitempty"`
	RunCmd     []Command `json:"runcmd,omitempty"`
	Users      []User    `json:"users,omitempty"`
	NTP        *NTP      `json:"ntp,omitempty"`
}

// File is one write_files entry.
type File struct {
	Path        string `json:"path"`
	Content     string `json:"content,omitempty"`
	Encoding    string `json:"encoding,omitempty"`
	Owner       string `json:"owner,omitempty"`
	Permissions string `json:"permissions,omitempty"`
	Append      bool   `json:"append,omitempty"`
}

// Command is a runcmd/bootcmd entry: a shell line, or an argv run directly.
type Command struct {
	Shell string
	Argv  []string
}

// String shows the command as it was written.
func (c Command) String() string {
	if c.Argv != nil {
		return strings.Join(c.Argv, " ")
	}
	return c.Shell
}

// UnmarshalJSON accepts both forms cloud-init accepts.
func (c *Command) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		c.Shell = s
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return fmt.Errorf("a command must be a string or a list: %w", err)
	}
	if len(items) == 0 {
		return errors.New("a command list must not be empty")
	}
	argv := make([]string, 0, len(items))
	for _, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			argv = append(argv, s)
			continue
		}
		// YAML turns bare words such as true or 42 into scalars; the
		// argument is their text, as the shell would have seen it.
		switch t := strings.TrimSpace(string(it)); {
		case t == "true" || t == "false" || (len(t) > 0 && (t[0] == '-' || (t[0] >= '0' && t[0] <= '9'))):
			argv = append(argv, t)
		default:
			return fmt.Errorf("command argument %s is not a string", t)
		}
	}
	c.Argv = argv
	return nil
}

// MarshalJSON writes the form it was read in.
func (c Command) MarshalJSON() ([]byte, error) {
	if c.Argv != nil {
		return json.Marshal(c.Argv)
	}
	return json.Marshal(c.Shell)
}

// User is a users entry, as CABPK writes them.
type User struct {
	Name              string   `json:"name"`
	Gecos             string   `json:"gecos,omitempty"`
	Groups            string   `json:"groups,omitempty"`
	HomeDir           string   `json:"homedir,omitempty"`
	Inactive          bool     `json:"inactive,omitempty"`
	LockPasswd        *bool    `json:"lock_passwd,omitempty"`
	Passwd            string   `json:"passwd,omitempty"`
	PrimaryGroup      string   `json:"primary_group,omitempty"`
	Shell             string   `json:"shell,omitempty"`
	Sudo              string   `json:"sudo,omitempty"`
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys,omitempty"`
}

// NTP is the ntp section.
type NTP struct {
	Enabled *bool    `json:"enabled,omitempty"`
	Servers []string `json:"servers,omitempty"`
}

// Unsupported is a refusal: something in the cloud-config fleet-agent does
// not run. It is reported, never skipped.
type Unsupported struct{ What string }

// Error says what fleet-agent does not run.
func (u *Unsupported) Error() string {
	return "cloud-config uses " + u.What + ", which fleet-agent does not run"
}

var (
	templateRE = regexp.MustCompile(`\{\{-?\s*([^}]*?)\s*-?\}\}`)
	metaRE     = regexp.MustCompile(`^(?:ds\.meta_data|v1)\.([a-z_]+)$`)
)

// known top-level keys and what to do with them.
var refusedKeys = map[string]string{
	"disk_setup": "disk_setup (partitioning)",
	"fs_setup":   "fs_setup (filesystems)",
	"mounts":     "mounts",
}

// Parse expands the template and parses the cloud-config. Refusals are
// *Unsupported errors.
func Parse(data []byte, md MetaData) (*Config, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("cloud-config is %d bytes, more than %d", len(data), MaxSize)
	}
	text := string(data)
	if strings.HasPrefix(text, "## template:") {
		header, rest, _ := strings.Cut(text, "\n")
		if strings.TrimSpace(strings.TrimPrefix(header, "## template:")) != "jinja" {
			return nil, &Unsupported{What: "template engine " + strings.TrimSpace(strings.TrimPrefix(header, "## template:"))}
		}
		expanded, err := expand(rest, md)
		if err != nil {
			return nil, err
		}
		text = expanded
	}
	if !strings.HasPrefix(strings.TrimLeft(text, " \t\r\n"), "#cloud-config") {
		return nil, errors.New("bootstrap data is not a #cloud-config document")
	}
	var raw map[string]json.RawMessage
	if err := yaml.Unmarshal([]byte(text), &raw); err != nil {
		return nil, fmt.Errorf("parsing cloud-config: %w", err)
	}
	if err := checkKeys(raw); err != nil {
		return nil, err
	}
	// The sections fleet-agent runs, decoded strictly: a field it does not
	// know inside them (write_files source, users uid, …) is a refusal, not
	// a silent skip. The target types guide the YAML conversion, so
	// "content: yes" stays a string.
	// (No embedded struct: the YAML converter only follows named fields.)
	var doc struct {
		WriteFiles []File          `json:"write_files,omitempty"`
		BootCmd    []Command       `json:"bootcmd,omitempty"`
		RunCmd     []Command       `json:"runcmd,omitempty"`
		Users      []User          `json:"users,omitempty"`
		NTP        *NTP            `json:"ntp,omitempty"`
		DiskSetup  json.RawMessage `json:"disk_setup,omitempty"`
		FsSetup    json.RawMessage `json:"fs_setup,omitempty"`
		Mounts     json.RawMessage `json:"mounts,omitempty"`
	}
	if err := yaml.UnmarshalStrict([]byte(text), &doc); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return nil, &Unsupported{What: "a field it does not know (" + err.Error() + ")"}
		}
		return nil, fmt.Errorf("parsing cloud-config: %w", err)
	}
	cfg := &Config{WriteFiles: doc.WriteFiles, BootCmd: doc.BootCmd, RunCmd: doc.RunCmd, Users: doc.Users, NTP: doc.NTP}
	for i, f := range cfg.WriteFiles {
		if f.Path == "" || !strings.HasPrefix(f.Path, "/") {
			return nil, fmt.Errorf("write_files[%d]: path %q must be absolute", i, f.Path)
		}
		if _, err := f.Decode(); err != nil {
			return nil, fmt.Errorf("write_files[%d] %s: %w", i, f.Path, err)
		}
		if _, err := f.Mode(); err != nil {
			return nil, fmt.Errorf("write_files[%d] %s: %w", i, f.Path, err)
		}
	}
	for i, u := range cfg.Users {
		if u.Name == "" {
			return nil, fmt.Errorf("users[%d]: name is required", i)
		}
	}
	return cfg, nil
}

// checkKeys refuses a document with a top-level key fleet-agent does not
// run (an empty section CABPK writes is no refusal).
func checkKeys(raw map[string]json.RawMessage) error {
	var keys []string
	for k, v := range raw {
		switch k {
		case "write_files", "bootcmd", "runcmd", "users", "ntp":
			continue
		}
		if what, ok := refusedKeys[k]; ok {
			if isEmpty(v) {
				continue // CABPK writes empty sections; nothing to refuse
			}
			return &Unsupported{What: what}
		}
		keys = append(keys, k)
	}
	if len(keys) > 0 {
		sort.Strings(keys)
		return &Unsupported{What: "the key(s) " + strings.Join(keys, ", ")}
	}
	return nil
}

func isEmpty(v json.RawMessage) bool {
	s := strings.TrimSpace(string(v))
	return s == "" || s == "null" || s == "{}" || s == "[]"
}

// expand replaces {{ ds.meta_data.* }} and refuses any other template syntax.
func expand(text string, md MetaData) (string, error) {
	if strings.Contains(text, "{%") || strings.Contains(text, "{#") {
		return "", &Unsupported{What: "jinja statements ({% … %} or {# … #})"}
	}
	var err error
	out := templateRE.ReplaceAllStringFunc(text, func(m string) string {
		expr := templateRE.FindStringSubmatch(m)[1]
		sub := metaRE.FindStringSubmatch(expr)
		if sub == nil {
			err = &Unsupported{What: "the template expression {{ " + expr + " }}"}
			return m
		}
		switch sub[1] {
		case "local_hostname":
			return md.LocalHostname
		case "instance_id":
			return md.InstanceID
		case "provider_id":
			return md.ProviderID
		default:
			err = &Unsupported{What: "the template variable " + expr}
			return m
		}
	})
	return out, err
}

// Decode returns the file's bytes after its encoding.
func (f File) Decode() ([]byte, error) {
	switch strings.ToLower(f.Encoding) {
	case "", "text/plain":
		return []byte(f.Content), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(strings.TrimSpace(f.Content))
	case "gz", "gzip":
		return gunzip([]byte(f.Content))
	case "gz+b64", "gzip+base64", "gz+base64", "gzip+b64":
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(f.Content))
		if err != nil {
			return nil, err
		}
		return gunzip(b)
	default:
		return nil, &Unsupported{What: "write_files encoding " + strconv.Quote(f.Encoding)}
	}
}

func gunzip(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, maxDecoded+1))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if len(out) > maxDecoded {
		return nil, fmt.Errorf("gzip: decoded content exceeds %d bytes", maxDecoded)
	}
	return out, nil
}

// Mode returns the file's permissions (cloud-init's default is 0644).
func (f File) Mode() (uint32, error) {
	if f.Permissions == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(strings.TrimSpace(f.Permissions), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("permissions %q are not an octal mode", f.Permissions)
	}
	return uint32(m), nil
}

// OwnerParts splits "user:group" (cloud-init's default is root:root).
func (f File) OwnerParts() (user, group string) {
	if f.Owner == "" {
		return "root", "root"
	}
	user, group, found := strings.Cut(f.Owner, ":")
	if !found {
		group = user
	}
	return user, group
}
