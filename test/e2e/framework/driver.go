package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// DriverSpec says how to run the kubelet plugin of a chart's DaemonSet as a local process for
// one node: the container's command and arguments, with the hostPath volumes moved below Dir,
// the downward-API environment filled in, and ExtraArgs appended (later flags win).
type DriverSpec struct {
	// Binary replaces the container command's program.
	Binary string
	// DriverName is the DRA driver name the plugin registers (default gpu.nvidia.com).
	DriverName string
	// DaemonSet is the chart's rendered DaemonSet; its first container is run.
	DaemonSet *appsv1.DaemonSet
	// Node is the node name (spec.nodeName of the pod).
	Node string
	// PodUID is the pod's UID (metadata.uid of the pod).
	PodUID string
	// Dir holds one directory per hostPath volume (Driver.Volumes says which). Keep it short:
	// sockets live below it and unix socket paths are limited to 108 bytes.
	Dir string
	// ExtraArgs are appended to the container's arguments.
	ExtraArgs []string
	// ExtraEnv is added to the container's environment ("NAME=value").
	ExtraEnv []string
	// LogFile receives the process's output (appended, so restarts share one log).
	LogFile string
}

// Driver is a running kubelet plugin process.
type Driver struct {
	Spec DriverSpec
	// Args is the command line it runs with.
	Args []string
	// Volumes maps each hostPath volume of the pod to its directory below Spec.Dir.
	Volumes map[string]string
	// RegistrationSocket is where the plugin registers with kubelet.
	RegistrationSocket string
	Proc               *Process
}

// PodEnv is the environment kubelet would give the container for spec (literal values and the
// downward-API fields spec.nodeName and metadata.uid).
func (s DriverSpec) PodEnv(c *corev1.Container) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = s.Node
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid":
			env[e.Name] = s.PodUID
		default:
			return nil, fmt.Errorf("container %s: env %s: only literal values, spec.nodeName and metadata.uid are supported", c.Name, e.Name)
		}
	}
	return env, nil
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Command builds the local command line and the volume directories for spec.
func (s DriverSpec) Command() (args []string, env map[string]string, volumes map[string]string, err error) {
	if s.DaemonSet == nil || len(s.DaemonSet.Spec.Template.Spec.Containers) == 0 {
		return nil, nil, nil, errors.New("driver spec: no DaemonSet container")
	}
	pod := s.DaemonSet.Spec.Template.Spec
	c := pod.Containers[0]
	if env, err = s.PodEnv(&c); err != nil {
		return nil, nil, nil, err
	}
	// Volume directories get short names (v0, v1, ...): sockets live below them, and
	// kubeletplugin v0.37.2 picks a rolling-update registration socket name whose path may be
	// exactly 108 bytes, one more than Linux accepts.
	volumes = map[string]string{}
	scratch := map[string]bool{}
	for i, v := range pod.Volumes {
		switch {
		case v.HostPath != nil:
			volumes[v.Name] = filepath.Join(s.Dir, fmt.Sprintf("v%d", i))
		case v.EmptyDir != nil:
			scratch[v.Name] = true
		}
	}
	type mount struct{ from, to string }
	var mounts []mount
	for _, m := range c.VolumeMounts {
		if scratch[m.Name] {
			continue // scratch space (an emptyDir /tmp): the local process uses the machine's
		}
		dir, ok := volumes[m.Name]
		if !ok {
			return nil, nil, nil, fmt.Errorf("container %s mounts %s, which is neither a hostPath nor an emptyDir volume", c.Name, m.Name)
		}
		mounts = append(mounts, mount{m.MountPath, dir})
	}
	local := func(a string) string {
		a = envRef.ReplaceAllStringFunc(a, func(ref string) string { return env[ref[2:len(ref)-1]] })
		for _, m := range mounts {
			if i := strings.Index(a, m.from); i >= 0 && (len(a) == i+len(m.from) || a[i+len(m.from)] == '/') {
				return a[:i] + m.to + a[i+len(m.from):]
			}
		}
		return a
	}
	if len(c.Command) == 0 {
		return nil, nil, nil, fmt.Errorf("container %s has no command", c.Name)
	}
	args = append([]string{s.Binary}, c.Command[1:]...)
	for _, a := range c.Args {
		args = append(args, local(a))
	}
	return append(args, s.ExtraArgs...), env, volumes, nil
}

// StartDriver starts the plugin and waits until its registration socket answers GetInfo.
func StartDriver(ctx context.Context, spec DriverSpec) (*Driver, error) {
	args, env, volumes, err := spec.Command()
	if err != nil {
		return nil, err
	}
	for _, dir := range volumes {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	}
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	envList = append(envList, spec.ExtraEnv...)
	d := &Driver{Spec: spec, Args: args, Volumes: volumes}
	if d.Proc, err = StartProcess("driver "+spec.Node, spec.LogFile, envList, args...); err != nil {
		return nil, err
	}
	if err := d.waitRegistration(ctx); err != nil {
		d.Proc.Kill()
		return nil, err
	}
	return d, nil
}

// waitRegistration waits for the plugin's own registration socket (its name depends on the
// pod UID) to answer GetInfo.
func (d *Driver) waitRegistration(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := d.Proc.Exited(); exited {
			return false, fmt.Errorf("%s exited: %v\n%s", d.Proc.Name, err, d.Proc.Tail(3000))
		}
		regDir := d.argValue("--registrar-dir")
		name := ""
		if d.Spec.PodUID != "" {
			name = kubeletplugin.RollingUpdateRegistrarSocketFile(regDir, d.driverName(), types.UID(d.Spec.PodUID))
		} else {
			name = d.driverName() + "-reg.sock"
		}
		socket := filepath.Join(regDir, name)
		if _, err := fakekubelet.Info(ctx, socket); err != nil {
			last = err
			return false, nil
		}
		d.RegistrationSocket = socket
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s never registered (last: %v): %w; log %s", d.Proc.Name, last, err, d.Proc.LogFile)
	}
	return nil
}

// driverName is the DRA driver name the plugin registers.
func (d *Driver) driverName() string {
	if d.Spec.DriverName == "" {
		return "gpu.nvidia.com"
	}
	return d.Spec.DriverName
}

// argValue returns the value of the last --name=value argument.
func (d *Driver) argValue(name string) string {
	v := ""
	for _, a := range d.Args {
		if after, ok := strings.CutPrefix(a, name+"="); ok {
			v = after
		}
	}
	return v
}

// ArgValue returns the value of the last --name=value argument the driver runs with.
func (d *Driver) ArgValue(name string) string { return d.argValue(name) }

// Restart starts the same command again (after a Kill or Stop) with the same directories, as
// kubelet restarts a crashed container of the same pod.
func (d *Driver) Restart(ctx context.Context) error {
	if exited, _ := d.Proc.Exited(); !exited {
		return fmt.Errorf("%s is still running", d.Proc.Name)
	}
	nd, err := StartDriver(ctx, d.Spec)
	if err != nil {
		return err
	}
	*d = *nd
	return nil
}

// FakeControl calls the driver's --fake-control endpoint: method POST or GET, path like
// "/xid", query values, and decodes a JSON answer into out when out is not nil.
func (d *Driver) FakeControl(ctx context.Context, method, path string, q url.Values, out any) error {
	addr := d.argValue("--fake-control")
	if addr == "" {
		return errors.New("the driver runs without --fake-control")
	}
	u := url.URL{Scheme: "http", Host: addr, Path: path, RawQuery: q.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u.String(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		_, _ = fmt.Fprintf(&b, "%s %s: %s", method, u.String(), resp.Status)
		return errors.New(b.String())
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// DaemonSetFrom picks the DaemonSet out of rendered objects.
func DaemonSetFrom(objs []*unstructured.Unstructured) (*appsv1.DaemonSet, error) {
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				return nil, err
			}
			return ds, nil
		}
	}
	return nil, errors.New("no DaemonSet among the rendered objects")
}

// LoopbackAddr returns 127.0.0.1:<a free port>.
func LoopbackAddr() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(ports[0]), nil
}
