// Package provision is fleet-agent's cloud-config provisioner: it turns an
// assignment's bootstrap data (CABPK's cloud-config) into a Kubernetes node
// without cloud-init and without a reboot, and resets the host when the
// Machine goes away.
//
// Everything it does to the host goes through a root directory (an os.Root,
// so no path in the bootstrap data can reach outside it) and a Runner, so
// tests and the demo run the real provisioner inside a sandbox.
package provision
