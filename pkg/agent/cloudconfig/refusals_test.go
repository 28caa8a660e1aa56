package cloudconfig

import (
	"errors"
	"strings"
	"testing"
)

func TestRefusesWhatItDoesNotRun(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"disk_setup", "#cloud-config\ndisk_setup:\n  /dev/sdb: {table_type: gpt}\n", "disk_setup"},
		{"fs_setup", "#cloud-config\nfs_setup:\n- {device: /dev/sdb1, filesystem: ext4}\n", "fs_setup"},
		{"mounts", "#cloud-config\nmounts:\n- [/dev/sdb1, /data]\n", "mounts"},
		{"unknown key", "#cloud-config\npackages: [nginx]\nruncmd: [x]\n", "the key(s) packages"},
		{"jinja statement", "## template: jinja\n#cloud-config\n{% if x %}runcmd: [x]{% endif %}\n", "jinja statements"},
		{"unknown variable", "## template: jinja\n#cloud-config\nruncmd: ['echo {{ ds.meta_data.public_ipv4 }}']\n", "public_ipv4"},
		{"other expression", "## template: jinja\n#cloud-config\nruncmd: ['echo {{ 7*7 }}']\n", "{{ 7*7 }}"},
		{"other engine", "## template: mustache\n#cloud-config\n", "template engine mustache"},
		{"encoding", "#cloud-config\nwrite_files:\n- {path: /x, content: y, encoding: rot13}\n", `encoding "rot13"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), md)
			var u *Unsupported
			if !errors.As(err, &u) || !strings.Contains(u.Error(), tt.want) {
				t.Fatalf("Parse() = %v, want a refusal naming %q", err, tt.want)
			}
		})
	}
	// Empty sections CABPK writes are not refusals.
	if _, err := Parse([]byte("#cloud-config\ndisk_setup: {}\nfs_setup: []\nmounts: []\nruncmd: [x]\n"), md); err != nil {
		t.Errorf("empty sections refused: %v", err)
	}
}

func TestRejectsMalformed(t *testing.T) {
	for name, doc := range map[string]string{
		"not cloud-config":  "#!/bin/sh\necho hi\n",
		"relative path":     "#cloud-config\nwrite_files:\n- {path: etc/x, content: y}\n",
		"bad permissions":   "#cloud-config\nwrite_files:\n- {path: /x, content: y, permissions: '0999'}\n",
		"bad base64":        "#cloud-config\nwrite_files:\n- {path: /x, content: '!!!', encoding: b64}\n",
		"empty command":     "#cloud-config\nruncmd:\n- []\n",
		"user without name": "#cloud-config\nusers:\n- {gecos: x}\n",
		"bad yaml":          "#cloud-config\nruncmd: [\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(doc), md); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestCommandForms(t *testing.T) {
	cfg, err := Parse([]byte("#cloud-config\nruncmd:\n- echo 'a b' > /tmp/x\n- [ls, -l, '/tmp dir']\nbootcmd:\n- [true]\n"), md)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RunCmd[0].Shell != "echo 'a b' > /tmp/x" || cfg.RunCmd[0].Argv != nil {
		t.Errorf("shell form %+v", cfg.RunCmd[0])
	}
	if strings.Join(cfg.RunCmd[1].Argv, "|") != "ls|-l|/tmp dir" {
		t.Errorf("list form %+v", cfg.RunCmd[1])
	}
	if len(cfg.BootCmd) != 1 || cfg.BootCmd[0].Argv[0] != "true" {
		t.Errorf("bootcmd %+v", cfg.BootCmd)
	}
}

func TestStrictSections(t *testing.T) {
	_, err := Parse([]byte("#cloud-config\nwrite_files:\n- {path: /x, source: {uri: 'https://example.com/x'}}\n"), md)
	var u *Unsupported
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "source") {
		t.Errorf("unknown write_files field: %v", err)
	}
}
