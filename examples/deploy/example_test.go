package deploy_test

import (
	"fmt"
	"io/fs"

	"github.com/gpudra/gpudra/examples/deploy"
)

func Example() {
	files, err := fs.Glob(deploy.Files, "workloads/0[1-3]-*.yaml")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		fmt.Println(f)
	}
	// Output:
	// workloads/01-exclusive-gpu.yaml
	// workloads/02-two-gpus.yaml
	// workloads/03-time-slicing.yaml
}
