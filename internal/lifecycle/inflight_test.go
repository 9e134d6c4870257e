package lifecycle_test

import (
	"testing"
	"time"

	"github.com/gpudra/gpudra/internal/lifecycle"
)

// TestInFlightWaitsForOperations: Wait returns only once every operation that began before it
// has ended, and at once when none is under way.
func TestInFlightWaitsForOperations(t *testing.T) {
	var f lifecycle.InFlight
	f.Wait() // none under way
	endA, endB := f.Begin(), f.Begin()
	waited := make(chan struct{})
	go func() { f.Wait(); close(waited) }()
	for i, end := range []func(){endA, endB} {
		select {
		case <-waited:
			t.Fatalf("Wait returned with %d operations under way", 2-i)
		case <-time.After(50 * time.Millisecond):
		}
		end()
	}
	<-waited
}
