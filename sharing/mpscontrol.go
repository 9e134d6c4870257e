package sharing

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// MPSControl is the MPSDaemons of a real host. Start runs `nvidia-cuda-mps-control -d` from
// the driver root with CUDA_VISIBLE_DEVICES, CUDA_MPS_PIPE_DIRECTORY and
// CUDA_MPS_LOG_DIRECTORY set for the daemon, then sends its default limits
// (set_default_active_thread_percentage, set_default_device_pinned_mem_limit). The daemon
// outlives this process (so prepared claims survive a plugin restart); it is supervised
// through its control socket <pipe>/control: Ready waits for the socket to accept a
// connection, Running tries one, Stop sends "quit" and waits for the socket to go away. The shm
// directory is a tmpfs of spec.ShmSizeBytes that Start mounts and Stop unmounts through its
// Mounter. The container runtime must see that mount when it bind-mounts the directory into
// workload containers: in a plugin pod, the MPS root must lie on a hostPath volume with
// mountPropagation Bidirectional (which needs a privileged container).
type MPSControl struct {
	root         DriverRootDir
	binary       string
	env          []string
	readyTimeout time.Duration
	poll         time.Duration
	mounter      Mounter
}

var _ MPSDaemons = (*MPSControl)(nil)

// MPSControlOption configures NewMPSControl.
type MPSControlOption func(*MPSControl)

// WithMPSDriverRoot sets the driver root nvidia-cuda-mps-control is found in (default "/"); for
// a root other than "/" it runs with the root's own dynamic loader (see DriverRootDir).
func WithMPSDriverRoot(root DriverRootDir) MPSControlOption {
	return func(m *MPSControl) { m.root = root }
}

// WithMPSBinary sets the nvidia-cuda-mps-control path, overriding the driver root lookup. With a
// driver root other than "/" the binary still runs with the root's loader, so it must be a
// dynamically linked program of that root.
func WithMPSBinary(path string) MPSControlOption { return func(m *MPSControl) { m.binary = path } }

// WithMPSEnv adds environment variables ("K=V") for nvidia-cuda-mps-control.
func WithMPSEnv(env ...string) MPSControlOption {
	return func(m *MPSControl) { m.env = append(m.env, env...) }
}

// WithMPSReadyTimeout sets how long Ready and Stop wait for the control socket (default 30s).
func WithMPSReadyTimeout(d time.Duration) MPSControlOption {
	return func(m *MPSControl) { m.readyTimeout = d }
}

// WithMPSMounter sets how shm directories are mounted (default a TmpfsMounter, which needs
// CAP_SYS_ADMIN; tests pass a fake such as sharingtest.FakeHost).
func WithMPSMounter(mounter Mounter) MPSControlOption {
	return func(m *MPSControl) { m.mounter = mounter }
}

// NewMPSControl returns an MPSDaemons that runs nvidia-cuda-mps-control.
func NewMPSControl(opts ...MPSControlOption) *MPSControl {
	m := &MPSControl{root: "/", readyTimeout: 30 * time.Second, poll: 50 * time.Millisecond, mounter: NewTmpfsMounter()}
	for _, o := range opts {
		o(m)
	}
	if m.binary == "" {
		m.binary = m.root.findBinary("nvidia-cuda-mps-control")
	}
	return m
}

func (m *MPSControl) daemonEnv(spec MPSDaemonSpec) []string {
	return append(slices.Clone(m.env), spec.Env()...)
}

// startLog is the file in the log directory that gets the output of `nvidia-cuda-mps-control -d`
// and of the daemon it forks.
const startLog = "start.log"

func controlSocket(spec MPSDaemonSpec) string { return spec.ControlSocket() }

// ControlSocket is the daemon's control socket, <PipeDir>/control: clients and
// nvidia-cuda-mps-control connect to it.
func (s MPSDaemonSpec) ControlSocket() string { return filepath.Join(s.PipeDir, "control") }

// DefaultCommands are the control daemon commands that apply the daemon's limits to the MPS
// server it spawns, and so to every client of that server, whatever the client's environment
// says: set_default_active_thread_percentage and set_default_device_pinned_mem_limit per
// device ordinal. They affect servers spawned after them, so they must reach the daemon before
// its first client does.
func (s MPSDaemonSpec) DefaultCommands() []string {
	var cmds []string
	if s.ActiveThreadPercentage != nil {
		cmds = append(cmds, fmt.Sprintf("set_default_active_thread_percentage %d", *s.ActiveThreadPercentage))
	}
	for _, ordinal := range sortedKeys(s.PinnedMemoryLimits) {
		cmds = append(cmds, fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", ordinal, s.PinnedMemoryLimits[ordinal]))
	}
	return cmds
}

// Env is the environment nvidia-cuda-mps-control runs with for this daemon: the devices it
// serves (CUDA_VISIBLE_DEVICES), its pipe and its log directory.
func (s MPSDaemonSpec) Env() []string {
	return []string{"CUDA_VISIBLE_DEVICES=" + strings.Join(s.DeviceUUIDs, ","),
		"CUDA_MPS_PIPE_DIRECTORY=" + s.PipeDir, "CUDA_MPS_LOG_DIRECTORY=" + s.LogDir}
}

// ProbeMPSControl connects to the daemon's control socket: true when it accepts, false when
// there is no socket or nobody listens on it, an error when the answer is not known.
func ProbeMPSControl(spec MPSDaemonSpec) (bool, error) { return probe(spec) }

// probe connects to the daemon's control socket: true when it accepts, false when there is no
// socket or nobody listens on it, an error when the answer is not known.
func probe(spec MPSDaemonSpec) (bool, error) {
	c, err := net.DialTimeout("unix", controlSocket(spec), time.Second)
	if err == nil {
		_ = c.Close()
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENAMETOOLONG) {
		return false, nil // no socket, nobody listens, or an address no daemon can listen on
	}
	return false, fmt.Errorf("MPS daemon %s: connecting to control socket %s: %w", spec.ID, controlSocket(spec), err)
}

// Running implements MPSDaemons.
func (m *MPSControl) Running(_ context.Context, spec MPSDaemonSpec) (bool, error) {
	return probe(spec)
}

// Start implements MPSDaemons.
func (m *MPSControl) Start(ctx context.Context, spec MPSDaemonSpec) error {
	logger := klog.FromContext(ctx).WithValues("daemon", spec.ID)
	if spec.PipeDir == "" || spec.LogDir == "" || spec.ShmDir == "" {
		return fmt.Errorf("MPS daemon %s: pipe, log and shm directories must be set", spec.ID)
	}
	if err := spec.CreateDirs(); err != nil {
		return err
	}
	size := spec.ShmSizeBytes
	if size <= 0 {
		size = DefaultMPSShmSize
	}
	if err := m.mounter.Mount(ctx, spec.ShmDir, size); err != nil {
		return fmt.Errorf("MPS daemon %s: shm directory: %w", spec.ID, err)
	}
	// A probe that cannot tell (a full listen backlog, a timeout) fails the start: a second
	// daemon on the same pipe directory would take the socket from the one that runs.
	running, err := probe(spec)
	if err != nil {
		return fmt.Errorf("MPS daemon %s: cannot tell whether it runs already: %w", spec.ID, err)
	}
	if running {
		logger.V(2).Info("MPS control daemon already runs")
	} else {
		logger.V(2).Info("Starting MPS control daemon", "binary", m.binary, "devices", spec.DeviceUUIDs, "pipeDir", spec.PipeDir)
		if err := m.root.startDaemon(ctx, m.binary, m.daemonEnv(spec), filepath.Join(spec.LogDir, startLog), "-d"); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", spec.ID, err)
		}
	}
	if err := m.Ready(ctx, spec); err != nil {
		return err
	}
	cmds := spec.DefaultCommands()
	if len(cmds) == 0 {
		return nil
	}
	if err := m.root.run(ctx, m.binary, m.daemonEnv(spec), strings.Join(cmds, "\n")+"\n"); err != nil {
		return fmt.Errorf("MPS daemon %s: setting defaults: %w", spec.ID, err)
	}
	return nil
}

// Ready implements MPSDaemons.
func (m *MPSControl) Ready(ctx context.Context, spec MPSDaemonSpec) error {
	return m.waitFor(ctx, spec, true)
}

func (m *MPSControl) waitFor(ctx context.Context, spec MPSDaemonSpec, up bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.readyTimeout)
	defer cancel()
	t := time.NewTicker(m.poll)
	defer t.Stop()
	for {
		// A probe that cannot tell is asked again, not taken for either answer.
		running, err := probe(spec)
		if err == nil && running == up {
			return nil
		}
		select {
		case <-ctx.Done():
			state := "accept connections"
			if !up {
				state = "go away"
			}
			cause := ctx.Err()
			if err != nil {
				cause = fmt.Errorf("%w; last probe: %w", cause, err)
			}
			return fmt.Errorf("MPS daemon %s: control socket %s did not %s within %s: %w", spec.ID, controlSocket(spec), state, m.readyTimeout, cause)
		case <-t.C:
		}
	}
}

// Stop implements MPSDaemons.
func (m *MPSControl) Stop(ctx context.Context, spec MPSDaemonSpec) error {
	logger := klog.FromContext(ctx).WithValues("daemon", spec.ID)
	// A probe that cannot tell fails the stop: removing the directories of a daemon that runs
	// would orphan it.
	running, err := probe(spec)
	if err != nil {
		return fmt.Errorf("MPS daemon %s: cannot tell whether it runs: %w", spec.ID, err)
	}
	if running {
		logger.V(2).Info("Stopping MPS control daemon")
		if err := m.root.run(ctx, m.binary, m.daemonEnv(spec), "quit\n"); err != nil {
			return fmt.Errorf("MPS daemon %s: %w", spec.ID, err)
		}
		if err := m.waitFor(ctx, spec, false); err != nil {
			return err
		}
	}
	if spec.ShmDir != "" {
		// Unmounted first: removing the files of a mounted tmpfs would leave its mount point busy.
		if err := m.mounter.Unmount(ctx, spec.ShmDir); err != nil {
			return fmt.Errorf("MPS daemon %s: shm directory: %w", spec.ID, err)
		}
	}
	return spec.RemoveDirs(logger)
}
