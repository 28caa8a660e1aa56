// Command etcd is the upstream etcd server, built from go.etcd.io/etcd/server/v3
// so tests need no downloaded binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
