package framework

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// KeepEnv is the environment variable that keeps a tier's directory, processes and logs after
// its tests pass (they are always kept after a failure).
const KeepEnv = "E2E_KEEP"

// Main runs a tier's tests between its set-up and its teardown, for the tier's TestMain: setUp
// builds the tier (it may return a teardown with an error, for what it started); its directory
// is printed with the set-up time. A failed set-up runs no test. It returns the exit code.
func Main(m *testing.M, tier string, setUp func(ctx context.Context) (dir string, teardown func(keep bool), err error)) int {
	start := time.Now()
	dir, teardown, err := setUp(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s set-up failed: %v\n", tier, err)
		if teardown != nil {
			teardown(true)
		}
		return 1
	}
	fmt.Printf("%s: ready in %s (%s)\n", tier, time.Since(start).Round(100*time.Millisecond), dir)
	code := m.Run()
	teardown(code != 0 || os.Getenv(KeepEnv) != "")
	return code
}
