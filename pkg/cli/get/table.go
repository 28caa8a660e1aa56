package get

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/edgefleet/fleet/pkg/cli/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
)

// tableChunk is how many rows one request returns, as kubectl's default.
const tableChunk = 500

// acceptTable asks the API server for its Table rendering, which for a CRD
// has the columns of its additionalPrinterColumns. `kubectl get` sends the
// same header, so both show the same columns by construction.
var acceptTable = strings.Join([]string{
	fmt.Sprintf("application/json;as=Table;v=%s;g=%s", metav1.SchemeGroupVersion.Version, metav1.GroupName),
	fmt.Sprintf("application/json;as=Table;v=%s;g=%s", metav1beta1.SchemeGroupVersion.Version, metav1beta1.GroupName),
	"application/json",
}, ",")

// request starts a request for the kind as kubectl get makes it: the API
// server's Table unless an -o format prints the objects; with --sort-by the
// rows carry their whole objects, which the sort reads.
func (o *Options) request() *rest.Request {
	gvr := o.kind.resource
	segments := []string{"/apis", gvr.Group, gvr.Version}
	if !o.AllNamespaces {
		segments = append(segments, "namespaces", o.conn.Namespace)
	}
	req := o.conn.REST.Get().AbsPath(append(segments, gvr.Resource)...)
	if o.Selector != "" {
		req.Param("labelSelector", o.Selector)
	}
	if o.tables() {
		req.SetHeader("Accept", acceptTable)
		if o.sorter != nil {
			req.Param("includeObject", "Object")
		}
	}
	return req
}

// serverTable lists the kind as the API server's Table, joining the chunks.
func (o *Options) serverTable(ctx context.Context) (*metav1.Table, error) {
	out := &metav1.Table{}
	cont := ""
	for {
		req := o.request().Param("limit", strconv.Itoa(tableChunk))
		if cont != "" {
			req.Param("continue", cont)
		}
		obj, err := req.Do(ctx).Get()
		if err != nil {
			return nil, o.explain(err)
		}
		t, err := decodeTable(obj)
		if err != nil {
			return nil, err
		}
		if len(out.ColumnDefinitions) == 0 {
			out.ColumnDefinitions = t.ColumnDefinitions
		}
		out.Rows = append(out.Rows, t.Rows...)
		// Chunks of one list share its resourceVersion, where a watch starts.
		out.ResourceVersion = t.ResourceVersion
		if cont = t.Continue; cont == "" {
			return out, nil
		}
	}
}

// explain turns a 404 for the kind into advice that fleet's CRDs are
// missing.
func (o *Options) explain(err error) error {
	return o.conn.Explain(kube.NoKind(err, o.kind.gvk))
}

// watch prints every change to the kind from resourceVersion rv on, as
// kubectl get --watch: a table row (no new header), or the object in the
// -o format. It ends when ctx does or the API server ends the watch.
func (o *Options) watch(ctx context.Context, rv string) error {
	w, err := o.request().Param("watch", "true").Param("resourceVersion", rv).Watch(ctx)
	if err != nil {
		return o.explain(err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			if e.Type == watch.Error {
				return fmt.Errorf("watching %s: %w", o.kind.resource.Resource, apierrors.FromObject(e.Object))
			}
			obj := e.Object
			if o.tables() {
				if obj, err = decodeTable(e.Object); err != nil {
					return err
				}
			}
			if err := o.print(obj); err != nil {
				return err
			}
		}
	}
}

// print prints obj; tables through one tab writer that remembers its
// column widths, so the rows a watch prints line up with the table above.
func (o *Options) print(obj runtime.Object) error {
	if _, ok := obj.(*metav1.Table); !ok {
		return oneLine(o.printer.PrintObj(obj, o.Out))
	}
	if o.tabs == nil {
		o.tabs = printers.GetNewTabWriter(o.Out)
	}
	if err := o.printer.PrintObj(obj, o.tabs); err != nil {
		return oneLine(err)
	}
	return o.tabs.Flush()
}

// oneLine keeps the first line of a printer's error: a JSONPath or template
// that fails on the objects adds the template and a dump of the objects.
func oneLine(err error) error {
	if err == nil {
		return nil
	}
	msg, _, cut := strings.Cut(err.Error(), "\n")
	if !cut {
		return err
	}
	msg, _, _ = strings.Cut(msg, " Printing more information for debugging the template:")
	return errors.New(msg)
}

// tables reports whether the output is the API server's tables (no -o, or
// -o wide) rather than the objects.
func (o *Options) tables() bool { return o.format == "" || o.format == "wide" }

// rowObject is the object a row of the table carries, as JSON.
func rowObject(row metav1.TableRow) map[string]any {
	if u, ok := row.Object.Object.(*unstructured.Unstructured); ok {
		return u.Object
	}
	return nil
}

// decodeTable turns the server's answer into a Table whose rows carry
// their objects' metadata (the printer reads namespace and labels there).
func decodeTable(obj runtime.Object) (*metav1.Table, error) {
	u, ok := obj.(*unstructured.Unstructured)
	gvk := obj.GetObjectKind().GroupVersionKind()
	if !ok || gvk.Kind != "Table" || (gvk.GroupVersion() != metav1.SchemeGroupVersion && gvk.GroupVersion() != metav1beta1.SchemeGroupVersion) {
		return nil, errors.New("the API server did not return a table (it is older than Kubernetes 1.15?)")
	}
	t := &metav1.Table{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
		return nil, fmt.Errorf("decoding the server's table: %w", err)
	}
	for i := range t.Rows {
		row := &t.Rows[i]
		if row.Object.Raw == nil || row.Object.Object != nil {
			continue
		}
		o, err := runtime.Decode(unstructured.UnstructuredJSONScheme, row.Object.Raw)
		if err != nil {
			return nil, fmt.Errorf("decoding a row of the server's table: %w", err)
		}
		row.Object.Object = o
	}
	return t, nil
}
