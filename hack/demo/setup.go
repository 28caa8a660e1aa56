package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/edgefleet/fleet/internal/testkit/testhost"
)

// setupPlan is what the demo makes of what the machine lacks for real
// edge hosts: Debian packages it can install, and what no package gives.
type setupPlan struct {
	// install are the Debian packages to install, each once, in the
	// order first needed; why says what hosts need each for.
	install, why []string
	// cannot is what stops real hosts even after an install: no root,
	// cgroup v2, bin/k8s incomplete, or packages and no apt-get.
	cannot []string
}

// planSetup decides, from what testhost.Missing reported and whether
// apt-get is on PATH, what to install and what stands in the way.
func planSetup(missing []string, haveAptGet bool) setupPlan {
	var p setupPlan
	seen := map[string]bool{}
	for _, m := range missing {
		name, why, ok := testhost.DebianPackage(m)
		switch {
		case !ok:
			// The one file no package gives is the image.
			if filepath.IsAbs(m) {
				m += " (make test-image builds it)"
			}
			p.cannot = append(p.cannot, m)
		case !seen[name]:
			seen[name] = true
			p.install = append(p.install, name)
			p.why = append(p.why, name+": "+why)
		}
	}
	if len(p.install) > 0 && !haveAptGet {
		p.cannot = append(p.cannot, "apt-get to install "+strings.Join(p.install, " ")+" (only Debian and Ubuntu are set up by the demo)")
	}
	return p
}

// installCommand is the one command that installs the plan's packages.
func (p setupPlan) installCommand() string {
	return "apt-get update && apt-get install -y " + strings.Join(p.install, " ")
}

// setUpRealNodes gives the machine what real edge hosts need from Debian,
// unless --no-install, and says which packages and why. It returns why
// real hosts cannot run here, in one line, or "" when they can.
func (d *demo) setUpRealNodes(ctx context.Context) (string, error) {
	missing := d.probe()
	if len(missing) == 0 {
		return "", nil
	}
	_, err := exec.LookPath("apt-get")
	plan := planSetup(missing, err == nil)
	switch {
	case len(plan.cannot) > 0:
		return "real edge hosts need " + strings.Join(plan.cannot, ", "), nil
	case d.noInstall:
		return fmt.Sprintf("real edge hosts need %s and --no-install is set; install them with: %s",
			strings.Join(missing, ", "), plan.installCommand()), nil
	}
	if err := d.install(ctx, plan); err != nil {
		return "", err
	}
	if still := d.probe(); len(still) > 0 {
		return "real edge hosts need " + strings.Join(still, ", "), nil
	}
	return "", nil
}

// installPackages is the demo's set-up step (--set-up-only): it installs
// the Debian packages real edge hosts lack, unless --no-install or
// --nodes=simulated, and says which and why. It is quiet about everything
// else — the image `make test-image` builds next, cgroup v2, no apt-get — which the
// demo's own run then reports in its one line.
func (d *demo) installPackages(ctx context.Context) error {
	if d.noInstall || d.nodes == nodesSimulated {
		return nil
	}
	// The image `make test-image` builds next (with what is installed
	// here) is no reason to hold back; root, cgroup v1 or apt-get missing
	// is: nothing installed would make hosts run.
	var missing []string
	for _, m := range d.probe() {
		if m != d.image() {
			missing = append(missing, m)
		}
	}
	_, err := exec.LookPath("apt-get")
	plan := planSetup(missing, err == nil)
	if len(plan.install) == 0 || len(plan.cannot) > 0 {
		return nil
	}
	return d.install(ctx, plan)
}

// install runs the plan's apt-get and checks that the packages gave what
// was missing.
func (d *demo) install(ctx context.Context, plan setupPlan) error {
	d.step("installing %s from Debian for the real edge hosts (--no-install refuses): %s",
		strings.Join(plan.install, " "), strings.Join(plan.why, "; "))
	if err := aptGet(ctx, "update", "-qq"); err != nil {
		return err
	}
	if err := aptGet(ctx, append([]string{"install", "-y", "-qq"}, plan.install...)...); err != nil {
		return err
	}
	var still []string
	for _, m := range d.probe() {
		if _, _, ok := testhost.DebianPackage(m); ok {
			still = append(still, m)
		}
	}
	if len(still) > 0 {
		return fmt.Errorf("after installing %s, real edge hosts still need %s", strings.Join(plan.install, " "), strings.Join(still, ", "))
	}
	return nil
}

// aptGet runs apt-get without questions; its output is shown only when
// it fails.
func aptGet(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 2000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
