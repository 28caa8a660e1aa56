package cli_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/edgefleet/fleet/pkg/contract/v1alpha1"
)

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// Bad inputs get one line naming the input, before anything is sent: the
// same error comes back when the API server cannot be reached at all.
func TestInputsAreCheckedBeforeSending(t *testing.T) {
	ns := newNamespace(t, "inputs")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "cluster", "Bad_Name", "--kubernetes-version", "v1.36.3"},
			`invalid cluster name "Bad_Name": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'`},
		{[]string{"create", "cluster", "ok", "--kubernetes-version", "v1.36.3", "--host-selector", "site in (a,b"},
			`invalid --host-selector/--control-plane-host-selector "site in (a,b"`},
		{[]string{"scale", "cluster", "Bad_Name", "--worker-machines", "1"}, `invalid cluster name "Bad_Name"`},
		{[]string{"delete", "cluster", "Bad_Name"}, `invalid cluster name "Bad_Name"`},
		{[]string{"describe", "cluster", "Bad_Name"}, `invalid cluster name "Bad_Name"`},
		{[]string{"kubeconfig", "Bad_Name"}, `invalid cluster name "Bad_Name"`},
		{[]string{"host", "cordon", "Bad_Host"}, `invalid host name "Bad_Host"`},
		{[]string{"get", "hosts", "-l", "site in (a"}, `invalid --selector "site in (a"`},
		{[]string{"token", "revoke", "NOT-AN-ID"}, `invalid token id "NOT-AN-ID"`},
		{[]string{"token", "create", "--labels", "fleet.edgefleet.io/cordoned=true"}, `invalid --labels key "fleet.edgefleet.io/cordoned"`},
		{[]string{"agent", "upgrade", "--version", "0.9"}, `--version "0.9": want vMAJOR.MINOR.PATCH, e.g. v0.9.2`},
		{[]string{"agent", "upgrade", "--version", "v0.9.2", "--max-unavailable", "0", "--wave-size", "150%"},
			`--wave-size "150%": want a percentage from 1% to 100%; --max-unavailable "0": want at least 1`},
		{[]string{"agent", "upgrade", "--version", "v0.9.2", "-l", "site in (a"}, `invalid -l "site in (a"`},
		{[]string{"agent", "abort", "Bad_Name"}, `invalid roll-out name "Bad_Name"`},
		{[]string{"describe", "rollout", "Bad_Name"}, `invalid roll-out name "Bad_Name"`},
	} {
		for _, server := range []string{"", "https://127.0.0.1:1"} {
			args := append([]string{"-n", ns}, tc.args...)
			if server != "" {
				args = append([]string{"--server", server}, args...)
			}
			_, _, err := fleet(t, args...)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("kubectl fleet %s: got %v, want one line starting %q", strings.Join(args, " "), err, tc.want)
			}
		}
	}
	for _, l := range []client.ObjectList{&clusterv1.ClusterList{}, &infrav1.EdgeClusterList{}, &infrav1.EdgeMachineTemplateList{}, &infrav1.EdgeAgentRolloutList{}} {
		if err := env.Client.List(context.Background(), l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		if items := reflect.ValueOf(l).Elem().FieldByName("Items"); items.Len() != 0 {
			t.Errorf("%T: %d objects written", l, items.Len())
		}
	}
}

// --host-selector takes kubectl's -l syntax whole (a set's comma is not a
// separator) and lands in spec.hostSelector as matchLabels and
// matchExpressions, which the hub's claim honours.
func TestCreateClusterHostSelectorSyntax(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "selector")
	_, stderr, err := fleet(t, "create", "cluster", "sel", "-n", ns, "--kubernetes-version", "v1.36.3", "--worker-machines", "1",
		"--host-selector", "site in (a,b)", "--control-plane-host-selector", "role=cp",
		"--worker-host-selector", "!fleet.edgefleet.io/interruptible")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, stderr)
	}
	site := metav1.LabelSelectorRequirement{Key: "site", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}
	for name, want := range map[string]*metav1.LabelSelector{
		"sel-control-plane": {MatchLabels: map[string]string{"role": "cp"}, MatchExpressions: []metav1.LabelSelectorRequirement{site}},
		"sel-md-0": {MatchExpressions: []metav1.LabelSelectorRequirement{site,
			{Key: "fleet.edgefleet.io/interruptible", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	} {
		tmpl := &infrav1.EdgeMachineTemplate{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tmpl); err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Spec.Template.Spec.HostSelector; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: hostSelector %v, want %v", name, got, want)
		}
	}
	if !strings.Contains(stderr, "match {role=cp,site in (a,b)}") {
		t.Errorf("the warning about hosts does not show the selector:\n%s", stderr)
	}
}

// Every refused input ends the command with an error of one line that says
// what was wrong, and nothing on stdout or stderr: no usage text, no help
// with exit status 0, no klog lines, no template dump.
func TestRefusalsAreOneLine(t *testing.T) {
	ns := newNamespace(t, "refusals")
	newHost(t, ns, "present", nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gte", "hosts"}, `unknown command "gte" for "kubectl fleet": want agent, completion, create, delete, describe, get, host, kubeconfig, scale, token, upgrade, version (did you mean "get"?)`},
		{[]string{"create", "clusters", "x"}, `unknown command "clusters" for "kubectl fleet create": want cluster (did you mean "cluster"?)`},
		{[]string{"host", "frob", "present"}, `unknown command "frob" for "kubectl fleet host": want approve, cordon, facts, logs, remove, retry, uncordon`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "kubectl fleet completion": want bash, fish, powershell, zsh`},
		{[]string{"scale", "cluster"}, "kubectl fleet scale cluster takes NAME [--worker-machines M] [--control-plane-machines N] [--wait]; arguments given: none"},
		{[]string{"get", "hosts", "extra"}, "kubectl fleet get takes (clusters|machines|hosts|rollouts|releases); arguments given: 2: hosts extra"},
		{[]string{"host", "cordon"}, "kubectl fleet host cordon takes NAME...; arguments given: none"},
		{[]string{"token", "list", "x"}, "kubectl fleet token list takes no arguments; arguments given: 1: x"},
		{[]string{"get", "hosts", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"scale", "cluster", "x", "--worker-machines", "two"}, `invalid argument "two" for "--worker-machines" flag: want a whole number`},
		{[]string{"delete", "cluster", "x", "--timeout", "soon"}, `invalid argument "soon" for "--timeout" flag`},
		{[]string{"scale", "cluster", "x", "--worker-machines", "1", "--wait", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
		{[]string{"-n", "Bad_NS", "get", "hosts"}, `invalid namespace "Bad_NS": a lowercase RFC 1123 label`},
		{[]string{"create", "cluster", "x", "--kubernetes-version", "1.36", "--control-plane-machines", "2"},
			`--kubernetes-version "1.36": want vMAJOR.MINOR.PATCH, e.g. v1.36.3; --control-plane-machines 2: want an odd number`},
		{[]string{"get", "hosts", "-o", "jsonpath={.items[5].spec}"}, `error executing jsonpath "{.items[5].spec}": Error executing template: array index out of bounds: index 5, length 1.`},
		{[]string{"get", "hosts", "--sort-by", ".spec.nope"}, `couldn't find any field with path "{.spec.nope}" in the list of objects`},
		{[]string{"describe", "cluster", "nope"}, fmt.Sprintf("cluster %q not found in namespace %s", "nope", ns)},
		{[]string{"host", "retry", "nope"}, fmt.Sprintf("host %q not found in namespace %s", "nope", ns)},
		{[]string{"agent", "upgrade", "--version", "v9.9.9"}, fmt.Sprintf("no EdgeAgentRelease of namespace %s has fleet-agent v9.9.9 (it has: none)", ns)},
		{[]string{"agent", "approve", "nope"}, fmt.Sprintf("edgeagentrollout %q not found in namespace %s", "nope", ns)},
		{[]string{"describe", "rollout", "nope"}, fmt.Sprintf("edgeagentrollout %q not found in namespace %s", "nope", ns)},
		// Nothing half applied: a missing host leaves the others as they were.
		{[]string{"host", "cordon", "present", "gone-1", "gone-2"}, fmt.Sprintf(`host "gone-1" not found in namespace %[1]s (see `+
			"`kubectl fleet get hosts`); host \"gone-2\" not found in namespace %[1]s", ns)},
	} {
		out, stderr, err := fleet(t, append([]string{"-n", ns}, tc.args...)...)
		if tc.args[0] == "-n" {
			out, stderr, err = fleet(t, tc.args...)
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || out != "" || stderr != "" {
			t.Errorf("kubectl fleet %s:\n got %v\nwant one line starting %q\nstdout %q\nstderr %q", strings.Join(tc.args, " "), err, tc.want, out, stderr)
		}
	}
	h := &infrav1.EdgeHost{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "present"}, h); err != nil || h.Labels[infrav1.CordonedLabel] != "" {
		t.Errorf("a refused cordon changed the host that exists: %v %v", err, h.Labels)
	}
	// A group with no subcommand shows its help, as kubectl does.
	if out, _, err := fleet(t, "create"); err != nil || !strings.Contains(out, "Available Commands:") {
		t.Errorf("kubectl fleet create: %v\n%s", err, out)
	}
}
