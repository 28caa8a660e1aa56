package linkprobe

import (
	"strings"
	"testing"
)

// retransmitFormat is tcp:tcp_retransmit_skb from Linux 6.18.
const retransmitFormat = `name: tcp_retransmit_skb
ID: 2281
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:const void * skbaddr;	offset:8;	size:8;	signed:0;
	field:const void * skaddr;	offset:16;	size:8;	signed:0;
	field:int state;	offset:24;	size:4;	signed:1;
	field:__u16 sport;	offset:28;	size:2;	signed:0;
	field:__u16 dport;	offset:30;	size:2;	signed:0;
	field:__u16 family;	offset:32;	size:2;	signed:0;
	field:__u8 saddr[4];	offset:34;	size:4;	signed:0;
	field:__u8 daddr[4];	offset:38;	size:4;	signed:0;
	field:__u8 saddr_v6[16];	offset:42;	size:16;	signed:0;
	field:__u8 daddr_v6[16];	offset:58;	size:16;	signed:0;
	field:int err;	offset:76;	size:4;	signed:1;

print fmt: "skbaddr=%p skaddr=%p family=%s sport=%hu dport=%hu", REC->skbaddr, REC->skaddr, REC->sport, REC->dport
`

// kfreeSkbFormat is skb:kfree_skb from Linux 5.4 (before rx_sk and reason
// moved things around), with the __data_loc style of a string field added to
// exercise that declaration form.
const kfreeSkbFormat = `name: kfree_skb
ID: 1348
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:void * skbaddr;	offset:8;	size:8;	signed:0;
	field:void * location;	offset:16;	size:8;	signed:0;
	field:unsigned short protocol;	offset:24;	size:2;	signed:0;
	field:__data_loc char[] name;	offset:28;	size:4;	signed:0;

print fmt: "skbaddr=%p protocol=%u location=%p", REC->skbaddr, REC->protocol, REC->location
`

func TestParseFormat(t *testing.T) {
	f, err := parseFormat(strings.NewReader(retransmitFormat))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "tcp_retransmit_skb" || f.ID != 2281 {
		t.Errorf("name, ID = %q, %d; want tcp_retransmit_skb, 2281", f.Name, f.ID)
	}
	if len(f.Fields) != 15 {
		t.Errorf("got %d fields, want 15: %v", len(f.Fields), f.Fields)
	}
	for name, want := range map[string]field{
		"common_pid": {Type: "int", Offset: 4, Size: 4, Signed: true},
		"skbaddr":    {Type: "const void *", Offset: 8, Size: 8},
		"dport":      {Type: "__u16", Offset: 30, Size: 2},
		"saddr_v6":   {Type: "__u8[16]", Offset: 42, Size: 16},
		"err":        {Type: "int", Offset: 76, Size: 4, Signed: true},
	} {
		if got := f.Fields[name]; got != want {
			t.Errorf("field %s = %+v, want %+v", name, got, want)
		}
	}

	f, err = parseFormat(strings.NewReader(kfreeSkbFormat))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Fields["name"], (field{Type: "__data_loc char[]", Offset: 28, Size: 4}); got != want {
		t.Errorf("field name = %+v, want %+v", got, want)
	}
	if off, err := f.loadOffset("protocol", 2); err != nil || off != 24 {
		t.Errorf("loadOffset(protocol) = %d, %v; want 24, nil", off, err)
	}
}

func TestParseFormatErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "no field lines found"},
		{"not a format file", "hello\nworld\n", "no field lines found"},
		{"bad ID", "name: x\nID: twelve\n", `line 2: invalid ID "twelve"`},
		{"bad offset", "\tfield:int x;\toffset:abc;\tsize:4;\tsigned:1;", `line 1: invalid offset "abc"`},
		{"negative size", "\tfield:int x;\toffset:8;\tsize:-4;\tsigned:1;", `line 1: invalid size "-4"`},
		{"missing size", "\tfield:int x;\toffset:8;\tsigned:1;", `line 1: field "x" has no size`},
		{"missing offset", "\tfield:int x;\tsize:4;", `line 1: field "x" has no offset`},
		{"no name", "\tfield:int;\toffset:8;\tsize:4;\tsigned:1;", `line 1: malformed field declaration "int"`},
		{"no colon", "\tfield:int x;\toffset 8;\tsize:4;", `line 1: malformed attribute "offset 8"`},
		{"bad signed", "\tfield:int x;\toffset:8;\tsize:4;\tsigned:yes;", `line 1: invalid signed "yes"`},
		{"duplicate", "\tfield:int x;\toffset:8;\tsize:4;\n\tfield:int x;\toffset:12;\tsize:4;", `line 2: duplicate field "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFormat(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFormat error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadOffset(t *testing.T) {
	f, err := parseFormat(strings.NewReader(retransmitFormat))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		size int
		want string // "" means success
	}{
		{"dport", 2, ""},
		{"sport", 2, ""},
		{"nosuch", 2, `tracepoint tcp_retransmit_skb has no field "nosuch"`},
		{"state", 2, `field "state" has size 4, want 2`},
		{"common_type", 2, `field "common_type" has unusable offset 0`}, // inside the common header
	} {
		_, err := f.loadOffset(tc.name, tc.size)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("loadOffset(%s): %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("loadOffset(%s) error = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}

	// A misaligned field (a hypothetical packed layout) must be refused
	// rather than handed to the verifier.
	f.Fields["odd"] = field{Type: "__u16", Offset: 33, Size: 2}
	if _, err := f.loadOffset("odd", 2); err == nil || !strings.Contains(err.Error(), "unusable offset 33") {
		t.Errorf("loadOffset(odd) error = %v, want unusable offset 33", err)
	}
}
