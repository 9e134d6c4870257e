package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/internal/lifecycle"
)

// TestFatalKeepsTheFirstFatalError: recoverable errors are only logged; the first fatal one
// closes Done and is Err, later ones do not replace it.
func TestFatalKeepsTheFirstFatalError(t *testing.T) {
	f := lifecycle.NewFatal()
	ctx := context.Background()
	f.HandleError(ctx, fmt.Errorf("publish: %w", kubeletplugin.ErrRecoverable), "slices")
	select {
	case <-f.Done():
		t.Fatal("a recoverable error closed Done")
	default:
	}
	first := errors.New("socket gone")
	f.HandleError(ctx, first, "grpc")
	f.HandleError(ctx, errors.New("later"), "grpc")
	<-f.Done()
	if !errors.Is(f.Err(), first) || f.Err().Error() != "grpc: socket gone" {
		t.Fatalf("Err() = %v, want the first fatal error", f.Err())
	}
}
