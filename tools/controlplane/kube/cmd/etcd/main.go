// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3/etcdmain), at the version k8s.io/kubernetes pins, so
// that the test control plane's store is the one the API server was built and tested against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
