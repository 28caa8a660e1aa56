package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	// echoBinary is test/echoserver, built by make demo; its image is
	// built here with nodeimage, as a user's CI would build a workload's.
	echoBinary = "fleet-echoserver"
	echoImage  = "fleet.demo/echoserver:v1"
	// serviceURL is the Service the demo makes, by its cluster DNS name.
	serviceURL = "http://web.default.svc.cluster.local/"
)

// serviceManifest runs the echo server on the workers behind Service web,
// and a client pod of the same image on the control-plane node.
var serviceManifest = fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}
      automountServiceAccountToken: false
      containers:
      - name: web
        image: %[1]s
        imagePullPolicy: Never
        args: ["--listen", ":8080"]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  selector: {app: web}
  ports:
  - {port: 80, targetPort: 8080}
---
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
spec:
  nodeSelector:
    node-role.kubernetes.io/control-plane: ""
  tolerations:
  - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
  automountServiceAccountToken: false
  containers:
  - name: client
    image: %[1]s
    imagePullPolicy: Never
    args: ["--listen", ":8080"]
`, echoImage)

// showService shows kubeadm's addons at work: a pod on the control-plane
// host fetches a Service of pods on a worker by its DNS name (CoreDNS
// resolves it, kube-proxy carries it, the hosts route pod ranges).
func (d *demo) showService(ctx context.Context) error {
	if d.agents < 2 {
		return nil
	}
	d.step("a pod on the control-plane host reaches a Service of pods on a worker by its DNS name (CoreDNS, kube-proxy)")
	archive := filepath.Join(d.dataDir, "demo", "echoserver.tar")
	if out, err := exec.CommandContext(ctx, filepath.Join(d.binDir, "nodeimage"), "build", "--name", echoImage,
		"--binary", filepath.Join(d.binDir, echoBinary), "--out", archive).CombinedOutput(); err != nil {
		return fmt.Errorf("building the echo server's image (make demo builds bin/nodeimage and bin/%s): %w: %s", echoBinary, err, out)
	}
	for _, h := range d.hosts {
		if err := h.th.ImportImages(ctx, archive); err != nil {
			return err
		}
	}
	manifest := filepath.Join(d.dataDir, "demo", "web.yaml")
	if err := os.WriteFile(manifest, []byte(serviceManifest), 0o600); err != nil {
		return err
	}
	if _, err := d.kubectl(ctx, "apply", "-f", manifest); err != nil {
		return err
	}
	get := []string{"exec", "client", "--", "/" + echoBinary, "--get", serviceURL}
	var answer string
	err := waitFor(ctx, 3*time.Minute, "the Service answering the client pod", func(s string) { fmt.Fprintf(d.out, "    %s\n", s) }, func() (string, error) {
		out, err := d.kubectl(ctx, get...)
		if err != nil || !strings.HasPrefix(out, "hello from web-") {
			return "waiting for the pods, CoreDNS and kube-proxy", errors.Join(err, fmt.Errorf("answer %q", out))
		}
		answer = out
		return "", nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "$ kubectl --kubeconfig %s %s\n%s", d.workloadKubeconfig(), strings.Join(get, " "), answer)
	return nil
}
