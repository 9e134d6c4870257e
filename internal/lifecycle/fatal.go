package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// Fatal is a plugin's kubeletplugin.DRAPlugin.HandleError: recoverable background errors of the
// kubelet-plugin helper (ResourceSlice publishing, health streams) are logged, since the helper
// or the next event retries them; any other error is fatal: the plugin cannot go on serving
// correctly, so Done is closed and Err returns it. The zero value is not usable: use NewFatal.
type Fatal struct {
	once sync.Once
	done chan struct{}
	err  error
}

// NewFatal returns a Fatal that has seen no fatal error.
func NewFatal() *Fatal { return &Fatal{done: make(chan struct{})} }

// HandleError implements kubeletplugin.DRAPlugin.HandleError.
func (f *Fatal) HandleError(ctx context.Context, err error, msg string) {
	logger := klog.FromContext(ctx)
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		logger.Info("Recoverable kubelet-plugin error", "msg", msg, "err", err)
		return
	}
	logger.Error(err, "Fatal kubelet-plugin error; the driver must restart", "msg", msg)
	f.once.Do(func() {
		f.err = fmt.Errorf("%s: %w", msg, err)
		close(f.done)
	})
}

// Done is closed by the first fatal error.
func (f *Fatal) Done() <-chan struct{} { return f.done }

// Err returns the fatal error that closed Done, nil before.
func (f *Fatal) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}
