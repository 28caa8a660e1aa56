package hostaccess

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgefleet/fleet/pkg/contract/hostaccess"
)

// Discovery: what the aggregation layer asks to list the API (and to
// tell that the hub is up). It says nothing secret, so it needs no user.

var groupVersion = metav1.GroupVersionForDiscovery{GroupVersion: hostaccess.GroupVersion, Version: hostaccess.Version}

func (s *Server) serveGroupList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
		Groups: []metav1.APIGroup{group()}})
}

func (s *Server) serveGroup(w http.ResponseWriter, _ *http.Request) {
	g := group()
	writeJSON(w, &g)
}

func group() metav1.APIGroup {
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: hostaccess.Group,
		Versions: []metav1.GroupVersionForDiscovery{groupVersion}, PreferredVersion: groupVersion}
}

func (s *Server) serveResources(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: hostaccess.GroupVersion,
		APIResources: []metav1.APIResource{
			{Name: hostaccess.Resource + "/" + hostaccess.SubresourceLog, Namespaced: true, Kind: "EdgeHostLog", Verbs: []string{"get"}},
			{Name: hostaccess.Resource + "/" + hostaccess.SubresourceFacts, Namespaced: true, Kind: "EdgeHostFacts", Verbs: []string{"get"}},
		},
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
