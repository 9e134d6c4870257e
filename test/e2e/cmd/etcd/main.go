// Command etcd is the etcd server the e2e tier runs under kube-apiserver. It is the upstream
// server (go.etcd.io/etcd/server/v3 at the version k8s.io/kubernetes v1.37.2 requires) behind a
// minimal main, so that `go build` can produce it from the module proxy like the Kubernetes
// components; it takes etcd's own flags unchanged.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
