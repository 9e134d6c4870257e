package sharing

import (
	"context"
	"strconv"

	"k8s.io/klog/v2"
)

// NvidiaSMI is the TimeSlicer of a real host: it runs
// `nvidia-smi compute-policy -i <uuid> --set-timeslice <n>` from the driver root.
type NvidiaSMI struct {
	root   DriverRootDir
	binary string
	env    []string
}

var _ TimeSlicer = (*NvidiaSMI)(nil)

// NvidiaSMIOption configures NewNvidiaSMI.
type NvidiaSMIOption func(*NvidiaSMI)

// WithSMIDriverRoot sets the driver root nvidia-smi is found in (default "/"); for a root other
// than "/" it runs with the root's own dynamic loader (see DriverRootDir).
func WithSMIDriverRoot(root DriverRootDir) NvidiaSMIOption {
	return func(n *NvidiaSMI) { n.root = root }
}

// WithSMIBinary sets the nvidia-smi path, overriding the driver root lookup. With a driver root
// other than "/" the binary still runs with the root's loader, so it must be a dynamically
// linked program of that root.
func WithSMIBinary(path string) NvidiaSMIOption { return func(n *NvidiaSMI) { n.binary = path } }

// WithSMIEnv adds environment variables ("K=V") for nvidia-smi.
func WithSMIEnv(env ...string) NvidiaSMIOption {
	return func(n *NvidiaSMI) { n.env = append(n.env, env...) }
}

// NewNvidiaSMI returns a TimeSlicer that runs nvidia-smi.
func NewNvidiaSMI(opts ...NvidiaSMIOption) *NvidiaSMI {
	n := &NvidiaSMI{root: "/"}
	for _, o := range opts {
		o(n)
	}
	if n.binary == "" {
		n.binary = n.root.findBinary("nvidia-smi")
	}
	return n
}

// TimeSlice implements TimeSlicer. NVML has no public time slice getter and nvidia-smi has no
// documented query for it, so it reports the value as unknown; Undo then restores Default.
func (n *NvidiaSMI) TimeSlice(context.Context, string) (int, bool, error) { return 0, false, nil }

// SetTimeSlice implements TimeSlicer.
func (n *NvidiaSMI) SetTimeSlice(ctx context.Context, gpuUUID string, value int) error {
	klog.FromContext(ctx).V(4).Info("Running nvidia-smi", "binary", n.binary, "device", gpuUUID, "timeSlice", value)
	return n.root.run(ctx, n.binary, n.env, "", "compute-policy", "-i", gpuUUID, "--set-timeslice", strconv.Itoa(value))
}
