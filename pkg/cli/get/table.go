package get

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/resource"
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

// serverTable lists the kind as the API server's Table, joining the chunks.
func (o *Options) serverTable() (*metav1.Table, error) {
	gvr := o.kind.resource
	infos, err := resource.NewBuilder(o.flags).
		Unstructured().
		NamespaceParam(o.conn.Namespace).DefaultNamespace().AllNamespaces(o.AllNamespaces).
		LabelSelectorParam(o.Selector).
		ResourceTypeOrNameArgs(true, gvr.Resource+"."+gvr.Version+"."+gvr.Group).
		RequestChunksOf(tableChunk).
		ContinueOnError().
		Flatten().
		TransformRequests(func(req *rest.Request) { req.SetHeader("Accept", acceptTable) }).
		Do().Infos()
	if err != nil {
		// The builder reports a kind the server lacks as plain text; ask
		// the client's mapper so the error says the CRDs are missing.
		if _, merr := o.conn.Client.RESTMapper().KindFor(gvr); merr != nil {
			return nil, o.conn.Explain(merr)
		}
		return nil, o.conn.Explain(err)
	}
	out := &metav1.Table{}
	for _, info := range infos {
		t, err := decodeTable(info.Object)
		if err != nil {
			return nil, err
		}
		if len(out.ColumnDefinitions) == 0 {
			out.ColumnDefinitions = t.ColumnDefinitions
		}
		out.Rows = append(out.Rows, t.Rows...)
	}
	return out, nil
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
