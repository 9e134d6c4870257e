package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/sharing"
	"github.com/gpudra/gpudra/sharing/mpspod"
)

// mpsQuitWait is how long mps-daemon waits for the daemon to quit after SIGTERM; the daemon pod's
// termination grace period (30s) is longer.
const mpsQuitWait = 20 * time.Second

func newMPSDaemonCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mps-daemon",
		Short: "run one MPS control daemon in the foreground (the command of the daemon pods serve creates)",
		Long: `mps-daemon runs the MPS control daemon of one claim or shared device in the foreground:
nvidia-cuda-mps-control -f of --driver-root, run with the root's own dynamic loader. Once its control
socket accepts, it sends the daemon's limits (set_default_active_thread_percentage,
set_default_device_pinned_mem_limit), then writes <log dir>/ready; on SIGTERM it sends "quit" and
waits for the daemon to exit. serve --mps-daemon-pods creates one pod per daemon running this
command with the daemon's spec; it is not meant to be run by hand.`,
		Example: `  gpu-dra-driver mps-daemon --driver-root /driver-root --spec '{"id":"...","deviceUUIDs":["GPU-..."],"dir":"...","pipeDir":"...","logDir":"...","shmDir":"..."}'`,
		Args:    noArgs,
	}
	specJSON := cmd.Flags().String("spec", "", "the daemon's sharing.MPSDaemonSpec as JSON (required)")
	driverRoot := cmd.Flags().String(flagDriverRoot, "/", "root of the NVIDIA driver installation nvidia-cuda-mps-control is run from (where this runs in a container, the host's driver root mounted into it, e.g. /driver-root)")
	fake := cmd.Flags().Bool("fake", false, "TESTS ONLY: run a fake control daemon that records the commands it gets in <log dir>/"+mpspod.CommandsFile+" (serve --nvml=fake)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		var spec sharing.MPSDaemonSpec
		if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
			return usageErrorf("--spec: %w", err)
		}
		if spec.ID == "" || spec.PipeDir == "" || spec.LogDir == "" {
			return usageErrorf("--spec: the daemon's id, pipeDir and logDir are required")
		}
		if !filepath.IsAbs(*driverRoot) {
			return usageErrorf("--%s=%q: must be an absolute path", flagDriverRoot, *driverRoot)
		}
		ctx := cmd.Context()
		logger := klog.FromContext(ctx).WithValues("daemon", spec.ID)
		ctx = klog.NewContext(ctx, logger)
		var daemon mpspod.Daemon = mpspod.NewControl(sharing.DriverRootDir(*driverRoot), spec)
		if *fake {
			logger.Info("WARNING: running a FAKE MPS control daemon (--fake): it starts no MPS server")
			daemon = &mpspod.FakeControl{Spec: spec}
		}
		if err := mpspod.Run(ctx, spec, daemon, mpsQuitWait); err != nil {
			return fmt.Errorf("MPS control daemon: %w", err)
		}
		return nil
	})
	return cmd
}
