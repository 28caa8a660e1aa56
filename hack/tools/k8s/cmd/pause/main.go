// Command pause is the process of a pod sandbox: it holds the pod's
// namespaces open until it is told to stop. As PID 1 of the sandbox it also
// reaps the zombies of children whose parents exited before them. Built with
// CGO_ENABLED=0, so its image needs nothing but this one file.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Upstream's pause prints its version for -v and exits: kubeadm upgrade's
	// CreateJob health check runs it so, and waits for the Job to complete.
	if len(os.Args) == 2 && os.Args[1] == "-v" {
		fmt.Println("pause (fleet test hosts)")
		return
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reapZombies()
	}
}

// reapZombies waits for every child that has exited, without blocking on the
// ones still running; SIGCHLD may stand for several of them.
func reapZombies() {
	for {
		pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
