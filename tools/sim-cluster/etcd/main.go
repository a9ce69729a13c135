// Command etcd runs the etcd server pinned by this module. Debian's etcd is older than the
// minimum Kubernetes 1.34 supports, so we build the one Kubernetes itself depends on.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
