package binaries_test

import (
	"context"
	"fmt"

	"github.com/gpudra/gpudra/test/e2e/framework/binaries"
)

// ExampleResolve shows what the e2e module pins and which binaries it builds.
func ExampleResolve() {
	set, err := binaries.Resolve(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Kubernetes", set.KubernetesVersion, "etcd", set.EtcdVersion)
	for _, b := range set.Binaries {
		fmt.Println(b.Name, b.Package)
	}
	// Output:
	// Kubernetes v1.37.2 etcd v3.7.0
	// etcd github.com/gpudra/gpudra/test/e2e/cmd/etcd
	// kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
	// kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
	// kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
}
