package kube

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// Object is a Kubernetes object of a kind in the plugin's scheme.
type Object interface {
	metav1.Object
	runtime.Object
}

// ObjectList is a list of such objects.
type ObjectList interface {
	metav1.ListInterface
	runtime.Object
}

// ObjectKey names an object.
type ObjectKey = types.NamespacedName

// ObjectKeyFromObject is obj's namespace and name.
func ObjectKeyFromObject(obj metav1.Object) ObjectKey {
	return ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// Client reads and writes the typed objects of the plugin's scheme through
// client-go's dynamic client. Resources are named from kinds (EdgeHost →
// edgehosts), so no request goes to discovery.
type Client struct {
	dyn    dynamic.Interface
	scheme *runtime.Scheme
}

// NewClient is a Client over dyn for the kinds in scheme.
func NewClient(dyn dynamic.Interface, scheme *runtime.Scheme) *Client {
	return &Client{dyn: dyn, scheme: scheme}
}

// resource is where objects of obj's kind live, in namespace ns ("" for
// every namespace or a cluster-scoped kind), and that kind.
func (c *Client) resource(obj runtime.Object, ns string) (dynamic.ResourceInterface, schema.GroupVersionKind, error) {
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return nil, schema.GroupVersionKind{}, err
	}
	gvk := gvks[0]
	if meta.IsListType(obj) {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	r := c.dyn.Resource(gvr)
	if ns == "" {
		return r, gvk, nil
	}
	return r.Namespace(ns), gvk, nil
}

// Get reads the object named key into obj.
func (c *Client) Get(ctx context.Context, key ObjectKey, obj Object) error {
	r, gvk, err := c.resource(obj, key.Namespace)
	if err != nil {
		return err
	}
	u, err := r.Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return NoKind(err, gvk)
	}
	return c.into(u, obj)
}

// ListOption narrows a List.
type ListOption interface{ applyToList(*listOptions) }

type listOptions struct {
	namespace string
	selector  labels.Selector
	// err is the first option that could not be applied: a List with it
	// would list more than asked.
	err error
}

func (o *listOptions) and(reqs ...labels.Requirement) {
	if o.selector == nil {
		o.selector = labels.NewSelector()
	}
	o.selector = o.selector.Add(reqs...)
}

// InNamespace lists in one namespace ("": every namespace).
type InNamespace string

func (n InNamespace) applyToList(o *listOptions) { o.namespace = string(n) }

// MatchingLabels lists the objects that carry all these labels.
type MatchingLabels map[string]string

func (m MatchingLabels) applyToList(o *listOptions) {
	if reqs, ok := labels.SelectorFromSet(labels.Set(m)).Requirements(); ok {
		o.and(reqs...)
	}
}

// HasLabels lists the objects that carry these label keys.
type HasLabels []string

func (h HasLabels) applyToList(o *listOptions) {
	for _, k := range h {
		r, err := labels.NewRequirement(k, selection.Exists, nil)
		if err != nil {
			o.err = cmp.Or(o.err, fmt.Errorf("label key %q: %w", k, err))
			continue
		}
		o.and(*r)
	}
}

// MatchingLabelsSelector lists the objects a selector selects.
type MatchingLabelsSelector struct{ labels.Selector }

func (m MatchingLabelsSelector) applyToList(o *listOptions) {
	reqs, ok := m.Requirements()
	if !ok {
		o.err = cmp.Or(o.err, fmt.Errorf("label selector %q selects nothing", m.String()))
		return
	}
	o.and(reqs...)
}

// List reads the objects of list's kind into list.
func (c *Client) List(ctx context.Context, list ObjectList, opts ...ListOption) error {
	var lo listOptions
	for _, o := range opts {
		o.applyToList(&lo)
	}
	if lo.err != nil {
		return lo.err
	}
	r, gvk, err := c.resource(list, lo.namespace)
	if err != nil {
		return err
	}
	var mo metav1.ListOptions
	if lo.selector != nil {
		mo.LabelSelector = lo.selector.String()
	}
	ul, err := r.List(ctx, mo)
	if err != nil {
		return NoKind(err, gvk)
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(ul.UnstructuredContent(), list)
}

// Create creates obj and reads back what the API server stored (or, for a
// review, answered).
func (c *Client) Create(ctx context.Context, obj Object) error {
	u, gvk, r, err := c.unstructured(obj)
	if err != nil {
		return err
	}
	out, err := r.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return NoKind(err, gvk)
	}
	return c.into(out, obj)
}

// Patch is the body of a patch and its type.
type Patch interface {
	Type() types.PatchType
	Data(obj Object) ([]byte, error)
}

type mergeFrom struct {
	original Object
	lock     bool
}

// MergeFrom is a JSON merge patch from original to the object patched, as
// kubectl and controller-runtime compute it.
func MergeFrom(original Object) Patch { return &mergeFrom{original: original} }

// MergeFromWithOptimisticLock is MergeFrom carrying the object's
// resourceVersion, so the API server refuses it with a Conflict when the
// object changed since it was read.
func MergeFromWithOptimisticLock(original Object) Patch {
	return &mergeFrom{original: original, lock: true}
}

func (p *mergeFrom) Type() types.PatchType { return types.MergePatchType }

func (p *mergeFrom) Data(obj Object) ([]byte, error) {
	before, err := json.Marshal(p.original)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	data, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil || !p.lock {
		return data, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	md["resourceVersion"] = obj.GetResourceVersion()
	return json.Marshal(m)
}

type rawPatch struct {
	pt   types.PatchType
	data []byte
}

// RawPatch is a patch of type pt whose body is data.
func RawPatch(pt types.PatchType, data []byte) Patch { return rawPatch{pt: pt, data: data} }

func (p rawPatch) Type() types.PatchType       { return p.pt }
func (p rawPatch) Data(Object) ([]byte, error) { return p.data, nil }

// Patch patches obj and reads back what the API server stored.
func (c *Client) Patch(ctx context.Context, obj Object, patch Patch) error {
	out, err := c.patch(ctx, obj, patch)
	if err != nil {
		return err
	}
	return c.into(out, obj)
}

// PatchScale patches obj's scale subresource, as kubectl scale does.
func (c *Client) PatchScale(ctx context.Context, obj Object, patch Patch) error {
	_, err := c.patch(ctx, obj, patch, "scale")
	return err
}

func (c *Client) patch(ctx context.Context, obj Object, patch Patch, subresource ...string) (*unstructured.Unstructured, error) {
	r, gvk, err := c.resource(obj, obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	data, err := patch.Data(obj)
	if err != nil {
		return nil, fmt.Errorf("computing the patch: %w", err)
	}
	out, err := r.Patch(ctx, obj.GetName(), patch.Type(), data, metav1.PatchOptions{}, subresource...)
	return out, NoKind(err, gvk)
}

// Preconditions delete an object only if it still has this UID and
// resourceVersion.
type Preconditions = metav1.Preconditions

// Delete deletes obj, if given only while the preconditions hold.
func (c *Client) Delete(ctx context.Context, obj Object, pre ...Preconditions) error {
	r, gvk, err := c.resource(obj, obj.GetNamespace())
	if err != nil {
		return err
	}
	var opts metav1.DeleteOptions
	if len(pre) > 0 {
		opts.Preconditions = &pre[0]
	}
	return NoKind(r.Delete(ctx, obj.GetName(), opts), gvk)
}

// ApplyOptions are server-side apply's: who owns the fields, whether to
// take them from other owners, and whether to write at all.
type ApplyOptions struct {
	FieldManager string
	Force        bool
	DryRun       bool
}

// Apply applies obj with server-side apply. obj is not changed.
func (c *Client) Apply(ctx context.Context, obj Object, opts ApplyOptions) error {
	u, gvk, r, err := c.unstructured(obj)
	if err != nil {
		return err
	}
	ao := metav1.ApplyOptions{FieldManager: opts.FieldManager, Force: opts.Force}
	if opts.DryRun {
		ao.DryRun = []string{metav1.DryRunAll}
	}
	_, err = r.Apply(ctx, obj.GetName(), u, ao)
	return NoKind(err, gvk)
}

// unstructured is obj as JSON-shaped data with its kind, and where it lives.
func (c *Client) unstructured(obj Object) (*unstructured.Unstructured, schema.GroupVersionKind, dynamic.ResourceInterface, error) {
	r, gvk, err := c.resource(obj, obj.GetNamespace())
	if err != nil {
		return nil, gvk, nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, gvk, nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, gvk, r, nil
}

// into decodes u into obj and, as controller-runtime's typed client does,
// leaves obj's kind unset (the scheme knows it).
func (c *Client) into(u *unstructured.Unstructured, obj Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("decoding %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return nil
}

// NoKind turns the API server's answer for a resource it does not serve (a
// 404 about no object) into the error a REST mapper gives for a kind it
// does not know, so that such a 404 is never read as "no such object".
func NoKind(err error, gvk schema.GroupVersionKind) error {
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return err
	}
	if d := status.Status().Details; d != nil && d.Name != "" {
		return err
	}
	return &meta.NoKindMatchError{GroupKind: gvk.GroupKind(), SearchedVersions: []string{gvk.Version}}
}
