package linkprobe

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// commonFieldsSize is the size of the common_* header every trace record
// starts with; the kernel refuses BPF context reads inside it.
const commonFieldsSize = 8

// field is one field of a tracepoint record, as tracefs describes it.
type field struct {
	Type   string // C type, e.g. "__u16" or "__u8[4]"
	Offset int    // byte offset in the record (the BPF context)
	Size   int    // bytes
	Signed bool
}

// eventFormat is a parsed events/<group>/<name>/format file.
type eventFormat struct {
	Name   string
	ID     uint64
	Fields map[string]field
}

// parseFormat parses a tracefs format file. It reads the layout from the
// running kernel rather than trusting hard-coded offsets, because the offsets
// move between kernel versions (fields are added to tracepoints over time).
func parseFormat(r io.Reader) (*eventFormat, error) {
	f := &eventFormat{Fields: map[string]field{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		var err error
		switch {
		case strings.HasPrefix(line, "name:"):
			f.Name = strings.TrimSpace(strings.TrimPrefix(line, "name:"))
		case strings.HasPrefix(line, "ID:"):
			s := strings.TrimSpace(strings.TrimPrefix(line, "ID:"))
			if f.ID, err = strconv.ParseUint(s, 10, 64); err != nil {
				return nil, fmt.Errorf("line %d: invalid ID %q", n, s)
			}
		case strings.HasPrefix(line, "field:"):
			name, fl, err := parseField(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			if _, dup := f.Fields[name]; dup {
				return nil, fmt.Errorf("line %d: duplicate field %q", n, name)
			}
			f.Fields[name] = fl
		}
		// Everything else ("format:", blank lines, "print fmt: ...") is
		// irrelevant to the record layout.
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading format: %w", err)
	}
	if len(f.Fields) == 0 {
		return nil, fmt.Errorf("no field lines found (not a tracefs format file?)")
	}
	return f, nil
}

// parseField parses
//
//	field:__u8 saddr[4];	offset:34;	size:4;	signed:0;
func parseField(line string) (string, field, error) {
	var fl field
	var name string
	seen := map[string]bool{}
	for part := range strings.SplitSeq(line, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, val, ok := strings.Cut(part, ":")
		if !ok {
			return "", fl, fmt.Errorf("malformed attribute %q (want key:value)", part)
		}
		seen[key] = true
		var err error
		switch key {
		case "field":
			name, fl.Type, err = parseDecl(val)
		case "offset":
			fl.Offset, err = parseNonNegative(key, val)
		case "size":
			fl.Size, err = parseNonNegative(key, val)
		case "signed":
			if val != "0" && val != "1" {
				err = fmt.Errorf("invalid signed %q (want 0 or 1)", val)
			}
			fl.Signed = val == "1"
		}
		if err != nil {
			return "", fl, err
		}
	}
	for _, k := range []string{"offset", "size"} {
		if !seen[k] {
			return "", fl, fmt.Errorf("field %q has no %s", name, k)
		}
	}
	return name, fl, nil
}

// parseDecl splits a C declaration such as "const void * skbaddr",
// "__u8 saddr[4]" or "__data_loc char[] name" into name and type.
func parseDecl(decl string) (name, typ string, err error) {
	decl = strings.TrimSpace(decl)
	i := strings.LastIndexAny(decl, " \t*")
	if i < 0 || i == len(decl)-1 {
		return "", "", fmt.Errorf("malformed field declaration %q (want \"type name\")", decl)
	}
	name, typ = decl[i+1:], strings.TrimSpace(decl[:i+1])
	if j := strings.IndexByte(name, '['); j >= 0 {
		typ += name[j:]
		name = name[:j]
	}
	if name == "" || typ == "" {
		return "", "", fmt.Errorf("malformed field declaration %q (want \"type name\")", decl)
	}
	return name, typ, nil
}

func parseNonNegative(key, val string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(val))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid %s %q", key, val)
	}
	return n, nil
}

// loadOffset returns the context offset of the named field after checking
// that a BPF program can load it as a size-byte integer: the verifier only
// allows aligned reads past the common header.
func (f *eventFormat) loadOffset(name string, size int) (int16, error) {
	fl, ok := f.Fields[name]
	switch {
	case !ok:
		return 0, fmt.Errorf("tracepoint %s has no field %q", f.Name, name)
	case fl.Size != size:
		return 0, fmt.Errorf("tracepoint %s field %q has size %d, want %d", f.Name, name, fl.Size, size)
	case fl.Offset < commonFieldsSize || fl.Offset%size != 0 || fl.Offset > 1<<15-1:
		return 0, fmt.Errorf("tracepoint %s field %q has unusable offset %d", f.Name, name, fl.Offset)
	}
	return int16(fl.Offset), nil
}
