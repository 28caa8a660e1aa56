package unitd

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/unit"
)

// DefaultUnitDirs are where systemd looks for system units, in its order.
var DefaultUnitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"}

// ErrNotFound is returned for a unit no unit directory holds.
var ErrNotFound = errors.New("unit not found")

// Command is one Exec*= line: the words as written (expanded at each start).
type Command struct {
	Words []string
	// IgnoreFailure is the "-" prefix: a failing exit counts as success.
	IgnoreFailure bool
}

// EnvFile is one EnvironmentFile= entry.
type EnvFile struct {
	Path string
	// Optional is the "-" prefix: a missing file is no error.
	Optional bool
}

// Unit is a service unit as loaded from its file and drop-ins.
type Unit struct {
	Name        string
	Description string
	// Files are the unit file and drop-ins read, in order.
	Files        []string
	ExecStartPre []Command
	ExecStart    []Command
	Environment  []string // KEY=VALUE, later wins
	EnvFiles     []EnvFile
	Restart      string        // no, always, on-failure
	RestartDelay time.Duration // RestartSec=
	KillMode     string        // control-group, process
	StopTimeout  time.Duration // TimeoutStopSec=
	Type         string
}

// Load reads the unit name from the first of dirs holding it, then the
// drop-ins <name>.d/*.conf of every dir, ordered by file name (a name in an
// earlier dir hides the same name in a later one), as systemd does.
func Load(dirs []string, name string) (*Unit, error) {
	if !strings.HasSuffix(name, ".service") {
		return nil, fmt.Errorf("%s: only .service units are supported", name)
	}
	u := &Unit{Name: name, Restart: "no", RestartDelay: 100 * time.Millisecond, KillMode: "control-group", StopTimeout: 90 * time.Second, Type: "simple"}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			u.Files = append(u.Files, p)
			break
		}
	}
	if len(u.Files) == 0 {
		return nil, fmt.Errorf("%s: %w in %s", name, ErrNotFound, strings.Join(dirs, ", "))
	}
	dropins := map[string]string{} // base name -> path
	for _, d := range dirs {
		matches, _ := filepath.Glob(filepath.Join(d, name+".d", "*.conf"))
		for _, m := range matches {
			if _, seen := dropins[filepath.Base(m)]; !seen {
				dropins[filepath.Base(m)] = m
			}
		}
	}
	for _, base := range slices.Sorted(maps.Keys(dropins)) {
		u.Files = append(u.Files, dropins[base])
	}
	for _, f := range u.Files {
		if err := u.apply(f); err != nil {
			return nil, err
		}
	}
	if len(u.ExecStart) != 1 {
		return nil, fmt.Errorf("%s: want exactly one ExecStart=, have %d (files %s)", name, len(u.ExecStart), strings.Join(u.Files, ", "))
	}
	return u, nil
}

// apply sets what one file says; an empty assignment resets a list.
func (u *Unit) apply(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	for _, o := range opts {
		// The parser keeps continuation lines' backslash-newline; systemd reads it as a space.
		v := strings.TrimSpace(strings.ReplaceAll(o.Value, "\\\n", " "))
		if err := u.set(o.Section, o.Name, v); err != nil {
			return fmt.Errorf("%s: [%s] %s=%s: %w", path, o.Section, o.Name, v, err)
		}
	}
	return nil
}

// set applies one assignment.
func (u *Unit) set(section, name, v string) error {
	switch section + "." + name {
	case "Unit.Description":
		u.Description = v
	case "Service.ExecStart", "Service.ExecStartPre":
		list := &u.ExecStart
		if name == "ExecStartPre" {
			list = &u.ExecStartPre
		}
		if v == "" {
			*list = nil
			return nil
		}
		c, err := parseCommand(v)
		if err != nil {
			return err
		}
		*list = append(*list, c)
	case "Service.Environment":
		if v == "" {
			u.Environment = nil
			return nil
		}
		words, err := splitWords(v)
		if err != nil {
			return err
		}
		for _, w := range words {
			if !strings.Contains(w, "=") {
				return fmt.Errorf("%q is no assignment", w)
			}
			u.Environment = append(u.Environment, w)
		}
	case "Service.EnvironmentFile":
		if v == "" {
			u.EnvFiles = nil
			return nil
		}
		p, opt := strings.CutPrefix(v, "-")
		u.EnvFiles = append(u.EnvFiles, EnvFile{Path: p, Optional: opt})
	case "Service.Restart":
		if !slices.Contains([]string{"no", "always", "on-failure"}, v) {
			return errors.New("supported: no, always, on-failure")
		}
		u.Restart = v
	case "Service.RestartSec", "Service.TimeoutStopSec":
		d, err := parseTimespan(v)
		if err != nil {
			return err
		}
		if name == "RestartSec" {
			u.RestartDelay = d
		} else {
			u.StopTimeout = d
		}
	case "Service.KillMode":
		if v != "control-group" && v != "process" {
			return errors.New("supported: control-group, process")
		}
		u.KillMode = v
	case "Service.Type":
		if !slices.Contains([]string{"simple", "exec", "notify"}, v) {
			return errors.New("supported: simple, exec, notify")
		}
		u.Type = v
	}
	return nil
}

// parseCommand reads an Exec*= value. Of the prefixes only "-" has an
// effect; "@", "+", "!", ":" are accepted and ignored.
func parseCommand(v string) (Command, error) {
	var c Command
	for len(v) > 0 && strings.ContainsRune("-@+!:", rune(v[0])) {
		if v[0] == '-' {
			c.IgnoreFailure = true
		}
		v = v[1:]
	}
	words, err := splitWords(v)
	if err != nil {
		return c, err
	}
	if len(words) == 0 {
		return c, errors.New("no executable")
	}
	c.Words = words
	return c, nil
}

// splitWords splits at white space, honouring "…" and '…' quotes and
// backslash escapes, as systemd does for Exec*= and Environment=.
func splitWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			w.WriteRune(unescape(rs[i]))
			inWord = true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unbalanced %c in %q", quote, s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

func unescape(r rune) rune {
	switch r {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	}
	return r
}

// Expand substitutes env into a command's words as systemd does: a word
// "$VAR" becomes the value split at white space (no word if unset or
// empty); "${VAR}" anywhere in a word is replaced by the value, keeping it
// one word; "$$" is a literal "$".
func Expand(words []string, env map[string]string) []string {
	var out []string
	for _, w := range words {
		if name, ok := strings.CutPrefix(w, "$"); ok && isVarName(name) {
			out = append(out, strings.Fields(env[name])...)
			continue
		}
		var b strings.Builder
		for i := 0; i < len(w); i++ {
			if w[i] == '$' && i+1 < len(w) && w[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if strings.HasPrefix(w[i:], "${") {
				if end := strings.IndexByte(w[i:], '}'); end > 0 && isVarName(w[i+2:i+end]) {
					b.WriteString(env[w[i+2:i+end]])
					i += end
					continue
				}
			}
			b.WriteByte(w[i])
		}
		out = append(out, b.String())
	}
	return out
}

func isVarName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Env is the environment a start of u gets: PATH as systemd sets it, then
// Environment=, then the EnvironmentFile= files read now (later wins).
func (u *Unit) Env() (map[string]string, error) {
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range u.Environment {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, ef := range u.EnvFiles {
		if err := readEnvFile(ef.Path, env); err != nil {
			if ef.Optional && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("environment file: %w", err)
		}
	}
	return env, nil
}

// readEnvFile reads KEY=VALUE lines; # and ; start comments; a value may
// be quoted with "…" or '…'.
func readEnvFile(path string, env map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !isVarName(k) {
			return fmt.Errorf("%s:%d: not KEY=VALUE", path, n)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			words, err := splitWords(v)
			if err != nil || len(words) != 1 {
				return fmt.Errorf("%s:%d: bad quoting", path, n)
			}
			v = words[0]
		}
		env[k] = v
	}
	return sc.Err()
}

// parseTimespan reads systemd time spans: "10" (seconds), "500ms",
// "1min 30s", "infinity" (here: a very long time).
func parseTimespan(s string) (time.Duration, error) {
	if s == "infinity" {
		return 100 * 365 * 24 * time.Hour, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(f * float64(time.Second)), nil
	}
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond, "ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	}
	var total time.Duration
	rest := strings.TrimSpace(s)
	if rest == "" {
		return 0, errors.New("empty time span")
	}
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 {
			return 0, fmt.Errorf("bad time span %q", s)
		}
		num, _ := strconv.ParseFloat(rest[:i], 64)
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return r == ' ' || r >= '0' && r <= '9' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("bad time span %q", s)
		}
		total += time.Duration(num * float64(unit))
		rest = strings.TrimLeft(rest[j:], " ")
	}
	return total, nil
}
