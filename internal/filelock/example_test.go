package filelock_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpudra/gpudra/internal/filelock"
)

func Example() {
	dir, _ := os.MkdirTemp("", "filelock")
	defer os.RemoveAll(dir)
	l, err := filelock.Open(filepath.Join(dir, "state.lock"))
	if err != nil {
		panic(err)
	}
	defer l.Close()
	if err := l.Lock(true); err != nil {
		panic(err)
	}
	fmt.Println("holding", filepath.Base(l.Name()))
	_ = l.Unlock()
	// Output: holding state.lock
}
