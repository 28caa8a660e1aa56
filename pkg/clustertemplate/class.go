package clustertemplate

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ClassName is the ClusterClass fleet ships.
const ClassName = "edge"

// The worker class of the shipped class, and the name create and the
// topology flavor give a topology's one MachineDeployment.
const (
	WorkerClass     = "worker"
	TopologyWorkers = "md-0"
)

// ClassFile is the release asset holding the class, named as clusterctl
// looks it up when a template's Cluster names the class.
const ClassFile = "clusterclass-" + ClassName + ".yaml"

//go:embed clusterclass-edge.yaml
var classYAML []byte

// Class is fleet's ClusterClass and the templates it names, as the release
// ships it.
func Class() []byte { return classYAML }

// ClassObjects are the class's objects in namespace, in the order they
// are created: the templates before the ClusterClass that names them.
func ClassObjects(namespace string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(classYAML)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", ClassFile, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		u.SetNamespace(namespace)
		objs = append(objs, u)
	}
}
