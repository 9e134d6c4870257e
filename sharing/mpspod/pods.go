package mpspod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/sharing"
)

// Labels of a daemon pod.
const (
	// ComponentLabel is app.kubernetes.io/component; daemon pods have ComponentValue.
	ComponentLabel = "app.kubernetes.io/component"
	// ComponentValue marks MPS control daemon pods.
	ComponentValue = "mps-control-daemon"
	// NodeLabel names the node a daemon pod runs on (left out for a node name that is no
	// valid label value).
	NodeLabel = "gpudra.io/node"
	// DaemonLabel is the daemon's ID (a claim UID or shared-<hash>).
	DaemonLabel = "gpudra.io/mps-daemon"
)

// ReadyFile is the file in the daemon's log directory that the daemon pod's command writes once
// the control socket accepts and the daemon's limits are applied; it removes it when it
// starts. Ready waits for it: a client that connected before the limits would get a server
// without them.
const ReadyFile = "ready"

// Config says how daemon pods are made.
type Config struct {
	// Client creates, reads and deletes the daemon pods (namespaced: create, get, delete).
	Client kubernetes.Interface
	// Namespace is where daemon pods are created: the driver's namespace.
	Namespace string
	// NodeName is this node: daemon pods run on it (spec.nodeName; no scheduler).
	NodeName string
	// Image is the daemon pods' image: the plugin's own, which has Command.
	Image string
	// Command starts a daemon in the pod; the daemon's spec follows as "--spec=<JSON>".
	// Default: gpu-dra-driver mps-daemon.
	Command []string
	// Args are appended after the spec (e.g. --driver-root=/driver-root, --nvml=fake).
	Args []string
	// DriverRoot is the host path of the NVIDIA driver root, mounted read-only at
	// /driver-root (empty: not mounted).
	DriverRoot string
	// PriorityClassName is the daemon pods' priority class (the plugin's).
	PriorityClassName string
	// ServiceAccountName is the daemon pods' service account; its token is not mounted.
	ServiceAccountName string
	// Privileged runs the daemon privileged, as nvidia-cuda-mps-control on real GPUs needs
	// (their device nodes); with HostPID it sees its clients' processes in other pods.
	Privileged, HostPID bool
	// PodNetwork gives daemon pods a network of their own. By default they use the host's
	// network namespace: a daemon talks over unix sockets only, so a pod network would add
	// nothing but a dependency on the node's CNI (and its start latency) to every MPS prepare.
	PodNetwork bool
	// ImagePullSecrets are the plugin's.
	ImagePullSecrets []corev1.LocalObjectReference
	// Mounter mounts each daemon's shm tmpfs on the host before its pod starts (default a
	// sharing.TmpfsMounter).
	Mounter sharing.Mounter
	// ReadyTimeout bounds Ready and Stop (default 2 minutes: a pod start includes an image
	// pull on a fresh node).
	ReadyTimeout time.Duration
}

// Daemons is a sharing.MPSDaemons that runs each MPS control daemon in a Pod of its own on
// this node, outside the plugin's pod: a plugin restart or a rolling update of the plugin's
// DaemonSet leaves the daemons, and the pods using them, running. Build it with New.
type Daemons struct {
	cfg  Config
	poll time.Duration
}

var _ sharing.MPSDaemons = (*Daemons)(nil)

// New returns the Daemons of cfg; Client, Namespace, NodeName and Image are required.
func New(cfg Config) (*Daemons, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.NodeName == "" || cfg.Image == "" {
		return nil, errors.New("MPS daemon pods need a client, a namespace, the node name and an image")
	}
	if len(cfg.Command) == 0 {
		cfg.Command = []string{"gpu-dra-driver", "mps-daemon"}
	}
	if cfg.Mounter == nil {
		cfg.Mounter = sharing.NewTmpfsMounter()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	return &Daemons{cfg: cfg, poll: 100 * time.Millisecond}, nil
}

// PodName is the name of the pod of daemon id on node: derived from the two alone, so that a
// plugin that crashed after creating the pod finds (adopts or deletes) the same pod after its
// restart. The node is part of it (a short hash) because daemon IDs need not differ between
// nodes: an earlier version's shared daemon was named after its GPU's UUID, and fake machines
// repeat theirs.
// IDs that make no DNS subdomain (never made by sharing.Manager) are hashed.
func PodName(node, id string) string {
	sum := sha256.Sum256([]byte(node))
	suffix := "-" + hex.EncodeToString(sum[:4])
	name := "mps-control-daemon-" + id + suffix
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	idSum := sha256.Sum256([]byte(id))
	return "mps-control-daemon-" + hex.EncodeToString(idSum[:12]) + suffix
}

func (d *Daemons) podName(spec sharing.MPSDaemonSpec) string { return PodName(d.cfg.NodeName, spec.ID) }

// Pod returns the pod that runs the daemon of spec.
func (d *Daemons) Pod(spec sharing.MPSDaemonSpec) (*corev1.Pod, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("MPS daemon %s: %w", spec.ID, err)
	}
	labels := map[string]string{ComponentLabel: ComponentValue}
	if len(validation.IsValidLabelValue(d.cfg.NodeName)) == 0 {
		labels[NodeLabel] = d.cfg.NodeName
	}
	if len(validation.IsValidLabelValue(spec.ID)) == 0 {
		labels[DaemonLabel] = spec.ID
	}
	toHost := corev1.MountPropagationHostToContainer
	mounts := []corev1.VolumeMount{
		// The daemon's pipe, log and shm directories at their host paths: the plugin probes the
		// same control socket, and the shm tmpfs the plugin mounts on the host reaches it.
		{Name: "daemon-dir", MountPath: spec.Dir, MountPropagation: &toHost},
		{Name: "tmp", MountPath: "/tmp"},
	}
	volumes := []corev1.Volume{
		{Name: "daemon-dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: spec.Dir, Type: ptr.To(corev1.HostPathDirectory)}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if d.cfg.DriverRoot != "" {
		mounts = append(mounts, corev1.VolumeMount{Name: "driver-root", MountPath: "/driver-root", ReadOnly: true, MountPropagation: &toHost})
		volumes = append(volumes, corev1.Volume{Name: "driver-root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d.cfg.DriverRoot, Type: ptr.To(corev1.HostPathDirectory)}}})
	}
	sc := &corev1.SecurityContext{RunAsUser: ptr.To[int64](0), ReadOnlyRootFilesystem: ptr.To(true)}
	if d.cfg.Privileged {
		sc.Privileged = ptr.To(true)
	} else {
		sc.AllowPrivilegeEscalation = ptr.To(false)
		sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	}
	args := append([]string{"--spec=" + string(js)}, d.cfg.Args...)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: d.podName(spec), Namespace: d.cfg.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      d.cfg.NodeName,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			PriorityClassName:             d.cfg.PriorityClassName,
			ServiceAccountName:            d.cfg.ServiceAccountName,
			AutomountServiceAccountToken:  ptr.To(false),
			HostPID:                       d.cfg.HostPID,
			HostNetwork:                   !d.cfg.PodNetwork,
			ImagePullSecrets:              d.cfg.ImagePullSecrets,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			SecurityContext:               &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "mps-control-daemon", Image: d.cfg.Image, Command: d.cfg.Command, Args: args,
				SecurityContext: sc, VolumeMounts: mounts,
			}},
			Volumes: volumes,
		},
	}, nil
}

// Start implements sharing.MPSDaemons: it creates the daemon's directories, mounts its shm
// tmpfs on the host and creates its pod. A pod of that name that exists already is adopted
// (a restarted plugin, a retried prepare); one being deleted is waited for and created again.
func (d *Daemons) Start(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	logger := klog.FromContext(ctx).WithValues("daemon", spec.ID, "pod", klog.KRef(d.cfg.Namespace, d.podName(spec)))
	if spec.PipeDir == "" || spec.LogDir == "" || spec.ShmDir == "" || spec.Dir == "" {
		return fmt.Errorf("MPS daemon %s: its directory and pipe, log and shm directories must be set", spec.ID)
	}
	if err := spec.CreateDirs(); err != nil {
		return err
	}
	size := spec.ShmSizeBytes
	if size <= 0 {
		size = sharing.DefaultMPSShmSize
	}
	if err := d.cfg.Mounter.Mount(ctx, spec.ShmDir, size); err != nil {
		return fmt.Errorf("MPS daemon %s: shm directory: %w", spec.ID, err)
	}
	pod, err := d.Pod(spec)
	if err != nil {
		return err
	}
	pods := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace)
	for {
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			logger.V(2).Info("Created MPS control daemon pod")
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("MPS daemon %s: creating pod %s/%s: %w", spec.ID, d.cfg.Namespace, pod.Name, err)
		}
		old, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("MPS daemon %s: reading pod %s/%s: %w", spec.ID, d.cfg.Namespace, pod.Name, err)
		}
		if old.DeletionTimestamp == nil && old.Spec.NodeName == d.cfg.NodeName {
			logger.V(2).Info("Adopting existing MPS control daemon pod", "podUID", old.UID)
			return nil
		}
		if old.DeletionTimestamp == nil {
			return fmt.Errorf("MPS daemon %s: pod %s/%s exists on node %q, not on this node %q", spec.ID, d.cfg.Namespace, pod.Name, old.Spec.NodeName, d.cfg.NodeName)
		}
		logger.V(2).Info("Waiting for the terminating MPS control daemon pod to go before creating it again")
		if err := d.waitGone(ctx, spec); err != nil {
			return err
		}
	}
}

// Ready implements sharing.MPSDaemons: it waits until the control socket accepts and the pod's
// command has applied the daemon's limits (ReadyFile). A pod that cannot start makes the error
// say why.
func (d *Daemons) Ready(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	return d.wait(ctx, spec, "accept connections with its limits applied", func(ctx context.Context) (bool, error) {
		up, err := sharing.ProbeMPSControl(spec)
		if err != nil || !up {
			return false, err
		}
		_, err = os.Stat(filepath.Join(spec.LogDir, ReadyFile))
		return err == nil, nil
	})
}

// Running implements sharing.MPSDaemons: whether the daemon's control socket accepts.
func (d *Daemons) Running(_ context.Context, spec sharing.MPSDaemonSpec) (bool, error) {
	return sharing.ProbeMPSControl(spec)
}

// Stop implements sharing.MPSDaemons: it deletes the daemon's pod (whose command asks the daemon
// to quit on SIGTERM), waits until the pod is gone and the control socket with it, unmounts
// the shm tmpfs and removes the directories. A pod that does not exist is not an error.
func (d *Daemons) Stop(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	logger := klog.FromContext(ctx).WithValues("daemon", spec.ID, "pod", klog.KRef(d.cfg.Namespace, d.podName(spec)))
	err := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace).Delete(ctx, d.podName(spec), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("MPS daemon %s: deleting pod %s/%s: %w", spec.ID, d.cfg.Namespace, d.podName(spec), err)
	}
	if err == nil {
		logger.V(2).Info("Deleted MPS control daemon pod")
	}
	if err := d.waitGone(ctx, spec); err != nil {
		return err
	}
	if err := d.wait(ctx, spec, "go away", func(context.Context) (bool, error) {
		up, err := sharing.ProbeMPSControl(spec)
		return !up, err
	}); err != nil {
		return err
	}
	if spec.ShmDir != "" {
		if err := d.cfg.Mounter.Unmount(ctx, spec.ShmDir); err != nil {
			return fmt.Errorf("MPS daemon %s: shm directory: %w", spec.ID, err)
		}
	}
	return spec.RemoveDirs(logger)
}

// waitGone waits until the daemon's pod no longer exists.
func (d *Daemons) waitGone(ctx context.Context, spec sharing.MPSDaemonSpec) error {
	return d.wait(ctx, spec, "have its pod deleted", func(ctx context.Context) (bool, error) {
		_, err := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace).Get(ctx, d.podName(spec), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// wait polls done until it answers true or ReadyTimeout passes; an error of done is retried
// and reported with the timeout, with the pod's state.
func (d *Daemons) wait(ctx context.Context, spec sharing.MPSDaemonSpec, what string, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ReadyTimeout)
	defer cancel()
	t := time.NewTicker(d.poll)
	defer t.Stop()
	for {
		ok, err := done(ctx)
		if err == nil && ok {
			return nil
		}
		select {
		case <-ctx.Done():
			cause := ctx.Err()
			if err != nil {
				cause = fmt.Errorf("%w; last check: %w", cause, err)
			}
			return fmt.Errorf("MPS daemon %s (pod %s/%s, %s) did not %s within %s: %w", spec.ID, d.cfg.Namespace, d.podName(spec),
				d.podState(context.WithoutCancel(ctx), spec), what, d.cfg.ReadyTimeout, cause)
		case <-t.C:
		}
	}
}

// podState describes the daemon pod for errors: its phase and container states.
func (d *Daemons) podState(ctx context.Context, spec sharing.MPSDaemonSpec) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := d.cfg.Client.CoreV1().Pods(d.cfg.Namespace).Get(ctx, d.podName(spec), metav1.GetOptions{})
	if err != nil {
		return "pod: " + err.Error()
	}
	s := "phase " + string(p.Status.Phase)
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf(", %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf(", %s terminated: %s (exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
		}
		if c.RestartCount > 0 {
			s += fmt.Sprintf(", %d restarts", c.RestartCount)
		}
	}
	return s
}
