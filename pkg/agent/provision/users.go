package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"os"

	"github.com/edgefleet/fleet/pkg/agent/cloudconfig"
)

var userNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// ensureUser applies one users entry the way cloud-init does for the
// fields CABPK emits: create the account if missing, sudo rule, authorized
// keys (appended, as cloud-init does), password lock. Files it creates are
// recorded for the reset through record.
func (p *Provisioner) ensureUser(ctx context.Context, root *os.Root, u cloudconfig.User, record func(string) error) error {
	// The name goes into a command line and a sudoers file name: only a
	// plain account name is accepted, never shell syntax.
	if !userNameRE.MatchString(u.Name) {
		return fmt.Errorf("user name %q is not a valid account name", u.Name)
	}
	if _, err := lookupID(root, "etc/passwd", u.Name); err != nil {
		argv := []string{"useradd", "--create-home"}
		if u.Gecos != "" {
			argv = append(argv, "--comment", u.Gecos)
		}
		if u.Shell != "" {
			argv = append(argv, "--shell", u.Shell)
		}
		if u.HomeDir != "" {
			argv = append(argv, "--home-dir", u.HomeDir)
		}
		if u.PrimaryGroup != "" {
			argv = append(argv, "--gid", u.PrimaryGroup)
		}
		if u.Groups != "" {
			argv = append(argv, "--groups", strings.ReplaceAll(u.Groups, " ", ""))
		}
		if u.Inactive {
			argv = append(argv, "--inactive", "0")
		}
		if u.Passwd != "" {
			argv = append(argv, "--password", u.Passwd)
		}
		argv = append(argv, u.Name)
		if out, err := p.opts.Runner.Run(ctx, cloudconfig.Command{Argv: argv}); err != nil {
			return fmt.Errorf("useradd: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if u.Sudo != "" && u.Sudo != "false" {
		if strings.ContainsAny(u.Sudo, "\n\r") {
			return errors.New("sudo rule spans lines")
		}
		f := cloudconfig.File{Path: "/etc/sudoers.d/90-fleet-" + u.Name, Content: u.Name + " " + u.Sudo + "\n", Permissions: "0440"}
		if err := p.write(root, f, record); err != nil {
			return err
		}
	}
	if len(u.SSHAuthorizedKeys) > 0 {
		home := homeOf(root, u)
		owner := ""
		if _, err := lookupID(root, "etc/passwd", u.Name); err == nil {
			owner = u.Name
			group := u.Name
			if u.PrimaryGroup != "" {
				group = u.PrimaryGroup
			}
			if _, err := lookupID(root, "etc/group", group); err == nil {
				owner += ":" + group
			} else {
				owner += ":root"
			}
		}
		// The account may have been made by a runner that does not write
		// this root's passwd (tests): then root keeps ownership.
		f := cloudconfig.File{Path: path.Join(home, ".ssh", "authorized_keys"),
			Content: strings.Join(u.SSHAuthorizedKeys, "\n") + "\n", Permissions: "0600", Owner: owner, Append: true}
		if err := p.write(root, f, record); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if u.LockPasswd == nil || *u.LockPasswd {
		if out, err := p.opts.Runner.Run(ctx, cloudconfig.Command{Argv: []string{"passwd", "--lock", u.Name}}); err != nil {
			return fmt.Errorf("locking the password: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// homeOf is the user's home: as configured, else from the root's passwd,
// else /home/<name>.
func homeOf(root *os.Root, u cloudconfig.User) string {
	if u.HomeDir != "" {
		return u.HomeDir
	}
	if b, err := root.ReadFile("etc/passwd"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Split(line, ":")
			if len(fields) >= 6 && fields[0] == u.Name && fields[5] != "" {
				return fields[5]
			}
		}
	}
	return "/home/" + u.Name
}
