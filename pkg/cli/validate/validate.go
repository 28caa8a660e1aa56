package validate

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NewClusterName checks the name of a cluster about to be created. Cluster
// API's webhook wants a valid label value (the name becomes the
// cluster-name label) and the API server a DNS-1123 subdomain; fleet also
// makes the name the first DNS label of the default control-plane endpoint,
// <name>.<namespace>.fleet.internal. A DNS-1123 label satisfies all three.
func NewClusterName(name string) error {
	return check("cluster name", name, validation.IsDNS1123Label(name))
}

// ClusterName checks the name of an existing Cluster by the rules Cluster
// API and the API server enforce, so clusters made by other tools (whose
// names may hold dots) stay reachable.
func ClusterName(name string) error {
	return check("cluster name", name, append(validation.IsDNS1123Subdomain(name), validation.IsValidLabelValue(name)...))
}

// HostName checks the name of an EdgeHost, an object name like any other.
func HostName(name string) error {
	return check("host name", name, validation.IsDNS1123Subdomain(name))
}

// RolloutName checks the name of an EdgeAgentRollout.
func RolloutName(name string) error {
	return check("roll-out name", name, validation.IsDNS1123Subdomain(name))
}

// Namespace checks a namespace given with flag.
func Namespace(flag, ns string) error {
	return check(flag, ns, validation.IsDNS1123Label(ns))
}

// Selector parses a label selector in kubectl's -l syntax (k=v, k!=v,
// k in (a,b), k notin (a), k, !k), naming flag in the error.
func Selector(flag, s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("invalid %s %q: %w", flag, s, err)
	}
	return sel, nil
}

// LabelSelector parses selectors like Selector and returns them as the
// metav1.LabelSelector an API object carries: k=v in matchLabels, the rest
// (k!=v as NotIn) in matchExpressions. Several selectors must all match,
// except that a key set with = in a later one replaces an earlier one's. It
// returns nil when nothing is selected on, which matches every host.
func LabelSelector(flag string, selectors ...string) (*metav1.LabelSelector, error) {
	var out *metav1.LabelSelector
	for _, s := range selectors {
		if strings.TrimSpace(s) == "" {
			continue
		}
		reqs, err := labels.ParseToRequirements(s)
		if err != nil {
			return nil, fmt.Errorf("invalid %s %q: %w", flag, s, err)
		}
		if out == nil {
			out = &metav1.LabelSelector{}
		}
		equal := map[string]bool{}
		for _, r := range reqs {
			if err := addRequirement(out, r, equal); err != nil {
				return nil, fmt.Errorf("invalid %s %q: %w", flag, s, err)
			}
		}
	}
	return out, nil
}

// addRequirement adds r to sel; equal holds the keys this selector string
// has already set with =.
func addRequirement(sel *metav1.LabelSelector, r labels.Requirement, equal map[string]bool) error {
	values := r.ValuesUnsorted()
	var op metav1.LabelSelectorOperator
	switch r.Operator() {
	case selection.Equals, selection.DoubleEquals:
		if equal[r.Key()] {
			return fmt.Errorf("%s is given twice", r.Key())
		}
		equal[r.Key()] = true
		if sel.MatchLabels == nil {
			sel.MatchLabels = map[string]string{}
		}
		sel.MatchLabels[r.Key()] = values[0]
		return nil
	case selection.NotEquals, selection.NotIn:
		op = metav1.LabelSelectorOpNotIn
	case selection.In:
		op = metav1.LabelSelectorOpIn
	case selection.Exists:
		op = metav1.LabelSelectorOpExists
	case selection.DoesNotExist:
		op = metav1.LabelSelectorOpDoesNotExist
	default:
		return fmt.Errorf("%s: a host selector cannot compare numbers (> and <)", r.String())
	}
	if len(values) == 0 {
		values = nil
	}
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: op, Values: values})
	return nil
}

// Labels parses k=v pairs into a label set, checking each key and value as
// the API server would.
func Labels(flag string, pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid %s %q: want key=value", flag, p)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("invalid %s key %q: %s", flag, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("invalid %s value %q for %s: %s", flag, v, k, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func check(what, value string, errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("invalid %s %q: %s", what, value, strings.Join(errs, "; "))
}

// Join returns the errors that are not nil as one error on one line, their
// messages separated by "; ", or nil when there are none: a user sees every
// bad input at once, and a refusal is still a single line.
func Join(errs ...error) error {
	var kept []error
	for _, err := range errs {
		if err != nil {
			kept = append(kept, err)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return joined(kept)
}

type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, err := range j {
		msgs[i] = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }
