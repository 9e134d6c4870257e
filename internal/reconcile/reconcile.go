package reconcile

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/cdi"
)

// Reconcile runs the steps of a plugin's reconciliation in order with the locks lock takes held
// for the whole run, after removing the temporary files of interrupted spec writes (their paths
// go to *tempRemoved). It goes on after a failed step, logs the report's summary and returns the
// errors joined. The steps get a context whose logger is named "reconcile".
func Reconcile[R fmt.Stringer](ctx context.Context, rep R, lock func() (func(), error), writer *cdi.Writer,
	tempRemoved *[]string, steps ...func(context.Context, R) error) error {
	logger := klog.FromContext(ctx).WithName("reconcile")
	ctx = klog.NewContext(ctx, logger)
	unlock, err := lock()
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	defer unlock()
	var errs []error
	if *tempRemoved, err = writer.CleanTemp(); err != nil {
		errs = append(errs, fmt.Errorf("remove temporary CDI files: %w", err))
	}
	for _, step := range steps {
		if err := step(ctx, rep); err != nil {
			errs = append(errs, err)
		}
	}
	logger.Info("Reconciled node state", "summary", rep.String())
	return errors.Join(errs...)
}
