package get

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/util/jsonpath"
)

// relaxedPath takes --sort-by as kubectl does ("a.b", ".a.b", "{a.b}" or
// "{.a.b}") and returns the JSONPath "{.a.b}", with kubectl's error.
func relaxedPath(s string) (string, error) {
	m := relaxedPathRE.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{name1.name2}' or '{.name1.name2}'")
	}
	if m[1] != "" {
		return "{." + m[1] + "}", nil
	}
	return "{." + m[2] + "}", nil
}

var relaxedPathRE = regexp.MustCompile(`^\{\.?([^{}]+)\}$|^\.?([^{}]+)$`)

// sorter orders objects by the value at a JSONPath, as kubectl get
// --sort-by: objects without the field come first, numbers and quantities
// ("100Mi") compare by value, other strings as text (an RFC 3339 time
// sorts by time).
type sorter struct {
	field  string
	parser *jsonpath.JSONPath
}

func newSorter(sortBy string) (*sorter, error) {
	field, err := relaxedPath(sortBy)
	if err != nil {
		return nil, err
	}
	p := jsonpath.New("sorting").AllowMissingKeys(true)
	if err := p.Parse(field); err != nil {
		return nil, fmt.Errorf("sorting error: %w", err)
	}
	return &sorter{field: field, parser: p}, nil
}

// sort reorders n objects, given as JSON-shaped maps by obj, through swap.
// Like kubectl, it refuses a path that no object has.
func (s *sorter) sort(n int, obj func(i int) map[string]any, swap func(i, j int)) error {
	keys := make([]any, n)
	found := false
	for i := range n {
		res, err := s.parser.FindResults(obj(i))
		if err != nil {
			return fmt.Errorf("sorting by %s: %w", s.field, err)
		}
		if len(res) > 0 && len(res[0]) > 0 {
			v := res[0][0]
			for v.Kind() == reflect.Interface && !v.IsNil() {
				v = v.Elem()
			}
			switch v.Kind() {
			case reflect.Map, reflect.Slice, reflect.Struct:
				return fmt.Errorf("field %s is a %s: sort by a field that holds a number, a string or a boolean", s.field, v.Kind())
			}
			if v.IsValid() && (v.Kind() != reflect.Interface || !v.IsNil()) {
				keys[i] = v.Interface()
				found = true
			}
		}
	}
	if n > 0 && !found {
		return fmt.Errorf("couldn't find any field with path %q in the list of objects", s.field)
	}
	sort.Stable(&byKey{keys: keys, swap: swap, quantities: allQuantities(keys)})
	return nil
}

// allQuantities tells whether every string key is a quantity ("2", "10Gi"):
// only then are strings compared by value, or the order would not be one
// ("10" < "1a" < "9" < "10").
func allQuantities(keys []any) bool {
	for _, k := range keys {
		if s, ok := k.(string); ok {
			if _, err := resource.ParseQuantity(s); err != nil {
				return false
			}
		}
	}
	return true
}

type byKey struct {
	keys       []any
	swap       func(i, j int)
	quantities bool
}

func (b *byKey) Len() int { return len(b.keys) }

func (b *byKey) Swap(i, j int) {
	b.keys[i], b.keys[j] = b.keys[j], b.keys[i]
	b.swap(i, j)
}

func (b *byKey) Less(i, j int) bool { return less(b.keys[i], b.keys[j], b.quantities) }

// less compares two JSON values, strings as quantities when quantities is
// set; a missing value is least.
func less(a, b any, quantities bool) bool {
	if a == nil || b == nil {
		return a == nil && b != nil
	}
	if x, ok := number(a); ok {
		if y, ok := number(b); ok {
			return x < y
		}
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		if !ok {
			break
		}
		if quantities {
			qx, qy := resource.MustParse(x), resource.MustParse(y)
			return qx.Cmp(qy) < 0
		}
		return x < y
	case bool:
		if y, ok := b.(bool); ok {
			return !x && y
		}
	}
	// Values of different kinds: keep a stable order by kind name.
	return fmt.Sprintf("%T", a) < fmt.Sprintf("%T", b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	}
	return 0, false
}
