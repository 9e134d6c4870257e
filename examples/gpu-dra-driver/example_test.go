package main

import (
	"context"
	"os"
)

// Example_migValidate checks a MIG layout the way `gpu-dra-driver mig validate` does.
func Example_migValidate() {
	run(context.Background(), []string{"mig", "validate", "--gpu", "A100-SXM4-40GB", "--profiles", "3g.20gb,2g.10gb@4"}, os.Stdout, os.Stderr)
	// Output:
	// valid: 3g.20gb@0,2g.10gb@4
	//
	// A100-SXM4-40GB: 8 memory slices, 7 compute slices
	//            | 0 | 1 | 2 | 3 | 4 | 5 | 6 | 7 |
	// 3g.20gb@0  |###############|   |   |   |   |
	// 2g.10gb@4  |   |   |   |   |#######|   |   |
	// free memory slices: 6,7
}
