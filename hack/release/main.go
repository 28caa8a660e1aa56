// Command release writes fleet's clusterctl release artifacts into a
// directory: `make release-manifests` runs it.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/edgefleet/fleet/hack/release/render"
)

func main() {
	var out string
	o := render.Options{Root: "."}
	flag.StringVar(&out, "out", "dist", "directory to write into")
	flag.StringVar(&o.Image, "image", render.ImageName, "repository of the hub's image")
	flag.StringVar(&o.Tag, "tag", "", "the image's tag")
	flag.StringVar(&o.Digest, "digest", "", "the image's digest (sha256:…), pinning it")
	flag.Parse()
	files, err := render.Write(out, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
	for _, f := range files {
		fmt.Println(f)
	}
}
