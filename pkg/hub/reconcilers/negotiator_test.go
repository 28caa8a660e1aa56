package reconcilers_test

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// clientNegotiator decodes metav1.Table responses.
func clientNegotiator() runtime.NegotiatedSerializer {
	s := runtime.NewScheme()
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return serializer.NewCodecFactory(s).WithoutConversion()
}
