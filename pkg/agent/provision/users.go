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
// keys, password lock. It returns the files it wrote (for the reset).
func (p *Provisioner) ensureUser(ctx context.Context, root *os.Root, u cloudconfig.User) ([]string, error) {
	// The name goes into a command line and a sudoers file name: only a
	// plain account name is accepted, never shell syntax.
	if !userNameRE.MatchString(u.Name) {
		return nil, fmt.Errorf("user name %q is not a valid account name", u.Name)
	}
	var files []string
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
			return files, fmt.Errorf("useradd: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if u.Sudo != "" && u.Sudo != "false" {
		f := "/etc/sudoers.d/90-fleet-" + u.Name
		if strings.ContainsAny(u.Sudo, "\n") {
			return files, errors.New("sudo rule spans lines")
		}
		if err := writeFile(root, cloudconfig.File{Path: f, Content: u.Name + " " + u.Sudo + "\n", Permissions: "0440"}); err != nil {
			return files, err
		}
		files = append(files, f)
	}
	if len(u.SSHAuthorizedKeys) > 0 {
		home := u.HomeDir
		if home == "" {
			home = "/home/" + u.Name
		}
		f := path.Join(home, ".ssh", "authorized_keys")
		owner := u.Name + ":" + u.Name
		if _, err := lookupID(root, "etc/passwd", u.Name); err != nil {
			// The account was made by a runner that does not write this
			// root's passwd (tests); keep root as owner rather than fail.
			owner = ""
		}
		if u.PrimaryGroup != "" && owner != "" {
			owner = u.Name + ":" + u.PrimaryGroup
		}
		if err := writeFile(root, cloudconfig.File{Path: f, Content: strings.Join(u.SSHAuthorizedKeys, "\n") + "\n",
			Permissions: "0600", Owner: owner}); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return files, err
		}
		files = append(files, f)
	}
	if u.LockPasswd == nil || *u.LockPasswd {
		if out, err := p.opts.Runner.Run(ctx, cloudconfig.Command{Argv: []string{"passwd", "--lock", u.Name}}); err != nil {
			return files, fmt.Errorf("locking the password: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return files, nil
}
