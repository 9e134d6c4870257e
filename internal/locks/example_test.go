package locks_test

import (
	"fmt"
	"os"

	"github.com/gpudra/gpudra/internal/locks"
)

// ExampleLocks serializes work on two accelerators: keys are locked in sorted order, so two
// operations on overlapping devices cannot deadlock.
func ExampleLocks() {
	dir, err := os.MkdirTemp("", "locks")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	locks, err := locks.NewLocks(dir)
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	unlock, err := locks.Lock([]string{"accel-1", "accel-0"})
	if err != nil {
		panic(err)
	}
	fmt.Println("holding accel-0 and accel-1")
	unlock()
	// Output: holding accel-0 and accel-1
}
