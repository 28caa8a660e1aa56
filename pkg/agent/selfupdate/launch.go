package selfupdate

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// The environment between the launcher and the agent it runs.
const (
	// EnvLaunched marks an agent a launcher chose: it runs as it is.
	EnvLaunched = "FLEET_AGENT_LAUNCHED"
	// EnvTrial holds the sha256 of the release an agent runs on trial.
	EnvTrial = "FLEET_AGENT_TRIAL"
	// EnvInstalled holds the installed binary's version, which an agent
	// ordered back to it switches to without a transfer.
	EnvInstalled = "FLEET_AGENT_INSTALLED"
	// EnvRelease holds the version of the release a launcher started, as
	// its signed bundle names it (the binary's own may differ: a build
	// without the version stamped reports "dev").
	EnvRelease = "FLEET_AGENT_RELEASE"
)

// ExitTrialExpired is the exit code of a trial that did not commit in
// time.
const ExitTrialExpired = 75

// Launcher starts the release the start rules choose.
type Launcher struct {
	Store Store
	// Args are the agent's arguments (without the program name).
	Args []string
	// Systemd says a service manager restarts the agent when it exits:
	// the launcher then becomes the chosen binary (exec) and the next
	// start applies the rules again. Without one it supervises the agent
	// as a child and applies them itself whenever it exits.
	Systemd bool
	// Installed is the version of this binary.
	Installed string
	Log       func(msg string, kv ...any)
}

// Launch returns nil when this process is to run the agent itself: it is
// what the rules chose, or a launcher already chose it. Otherwise it
// runs the chosen binary and does not return (it exits with the agent).
func (l Launcher) Launch() error {
	if os.Getenv(EnvLaunched) != "" {
		return nil
	}
	if l.Systemd {
		d, err := l.decide()
		if err != nil || d.Path == "" {
			return err
		}
		env := append(os.Environ(), EnvLaunched+"=1", EnvInstalled+"="+l.Installed, EnvRelease+"="+d.Slot.Version)
		if d.Trial != nil {
			env = append(env, EnvTrial+"="+d.Trial.SHA256)
		}
		err = syscall.Exec(d.Path, append([]string{d.Path}, l.Args...), env)
		return fmt.Errorf("starting fleet-agent %s (%s): %w", d.Slot.Version, d.Path, err)
	}
	return l.supervise()
}

func (l Launcher) decide() (Decision, error) {
	d, err := l.Store.Decide(time.Now(), l.Installed)
	if err != nil {
		return d, err
	}
	if r := d.RolledBack; r != nil {
		l.Log("Rolled back a failed trial", "version", r.Version, "back to", orInstalled(d.Slot.Version), "reason", r.Reason)
	}
	if d.Trial != nil {
		l.Log("Starting a release on trial", "version", d.Trial.Version, "from", d.Trial.From, "deadline", d.Trial.Deadline)
	}
	return d, nil
}

func orInstalled(v string) string {
	if v == "" {
		return "the installed binary"
	}
	return v
}

// supervise runs the chosen binary as a child until a signal stops it,
// choosing again whenever the child exits; a trial past its deadline is
// stopped. It returns nil when the rules choose the installed binary.
func (l Launcher) supervise() error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	backoff := time.Second
	for {
		d, err := l.decide()
		if err != nil || d.Path == "" {
			return err
		}
		cmd := exec.Command(d.Path, l.Args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), EnvLaunched+"=1", EnvInstalled+"="+l.Installed, EnvRelease+"="+d.Slot.Version)
		var deadline <-chan time.Time
		if d.Trial != nil {
			cmd.Env = append(cmd.Env, EnvTrial+"="+d.Trial.SHA256)
			deadline = time.After(time.Until(d.Trial.Deadline))
		}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			l.Log("Cannot start fleet-agent", "version", d.Slot.Version, "error", err.Error())
		} else {
			l.wait(cmd, d, deadline, stop)
		}
		if time.Since(started) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-stop:
			os.Exit(0)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// wait waits for the child to exit: it passes a stop signal on and exits
// with the child, and stops a trial still uncommitted at its deadline.
func (l Launcher) wait(cmd *exec.Cmd, d Decision, deadline <-chan time.Time, stop <-chan os.Signal) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case sig := <-stop:
			_ = cmd.Process.Signal(sig)
			var ee *exec.ExitError
			if err := <-exited; errors.As(err, &ee) {
				os.Exit(ee.ExitCode())
			}
			os.Exit(0)
		case <-deadline:
			deadline = nil
			if _, still := l.Store.Trial(); !still {
				continue
			}
			l.Log("The trial did not commit in time; stopping it", "version", d.Trial.Version)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			return
		case err := <-exited:
			l.Log("fleet-agent exited", "version", orInstalled(d.Slot.Version), "error", fmt.Sprint(err))
			return
		}
	}
}
