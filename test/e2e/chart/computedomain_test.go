package chart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// computeDomainPods returns the pod specs of the ComputeDomain controller's Deployment and the
// ComputeDomain plugin's DaemonSet.
func computeDomainPods(t *testing.T, objs []*unstructured.Unstructured) (controller, plugin *corev1.PodSpec) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d); err != nil {
				t.Fatal(err)
			}
			if d.Spec.Template.Labels["app.kubernetes.io/component"] == "compute-domain-controller" {
				controller = &d.Spec.Template.Spec
			}
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ds); err != nil {
				t.Fatal(err)
			}
			if ds.Spec.Template.Labels["app.kubernetes.io/component"] == "compute-domain-plugin" {
				plugin = &ds.Spec.Template.Spec
			}
		}
	}
	if controller == nil || plugin == nil {
		t.Fatalf("no ComputeDomain controller Deployment (%v) or plugin DaemonSet (%v)", controller != nil, plugin != nil)
	}
	return controller, plugin
}

// TestComputeDomainsOnAFakeMachine: with fakeMachine.name the ComputeDomain plugin serves the
// fake GB200 tray (--nvml=fake, computeDomains.fakeClique as --fake-clique), and with
// fakeMachine.driverRoot that installation stands for the host's: the plugin mounts it, its dev
// and proc as the host's /dev and /proc, and the controller gives it to the IMEX daemons. On
// real GPUs the plugin reads NVML from nvidiaDriverRoot, with the host's /dev and /proc.
func TestComputeDomainsOnAFakeMachine(t *testing.T) {
	type want struct {
		fakeArgs                                 []string // the plugin's arguments after --ready-timeout
		driverRoot, dev, proc, daemonsDriverRoot string
	}
	for _, tc := range []struct {
		name string
		vals map[string]any
		want want
	}{
		{"real-gpus", map[string]any{"nvidiaDriverRoot": "/run/nvidia/driver"},
			want{nil, "/run/nvidia/driver", "/dev", "/proc", "--driver-root=/run/nvidia/driver"}},
		{"fake-tray", map[string]any{"fakeMachine": map[string]any{"name": "gb200-nvl4"}},
			want{[]string{"--nvml=fake"}, "/", "/dev", "/proc", "--driver-root=/"}},
		{"fake-tray-with-root-and-clique", map[string]any{
			"fakeMachine":    map[string]any{"name": "gb200-nvl4", "driverRoot": "/tmp/gn1/driver-root/"},
			"computeDomains": map[string]any{"enabled": true, "fakeClique": "8c3f5e0a-17d2-4b6e-9a51-0f2d3c4b5a69.7"}},
			want{[]string{"--nvml=fake", "--fake-clique=8c3f5e0a-17d2-4b6e-9a51-0f2d3c4b5a69.7"},
				"/tmp/gn1/driver-root/", "/tmp/gn1/driver-root/dev", "/tmp/gn1/driver-root/proc", "--driver-root=/tmp/gn1/driver-root/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{"computeDomains": map[string]any{"enabled": true}}
			for k, v := range tc.vals {
				vals[k] = v
			}
			controller, plugin := computeDomainPods(t, render(t, kubeVersion, vals))
			args := plugin.Containers[0].Args
			var fakeArgs []string
			for i, a := range args {
				if len(a) > 16 && a[:16] == "--ready-timeout=" {
					fakeArgs = args[i+1 : len(args)-1] // before -v
				}
			}
			var daemonsRoot string
			for _, a := range controller.Containers[0].Args {
				if len(a) > 14 && a[:14] == "--driver-root=" {
					daemonsRoot = a
				}
			}
			got := want{fakeArgs, volume(t, plugin, "driver-root").HostPath.Path,
				volume(t, plugin, "host-dev").HostPath.Path, volume(t, plugin, "host-proc").HostPath.Path, daemonsRoot}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ComputeDomain pods (-want +got):\n%s", diff)
			}
		})
	}
}

// TestComputeDomainPluginRunsAsRoot: the ComputeDomain plugin runs as root, not as the image's
// user: it creates its socket, checkpoint and the IMEX daemons' directories in root-owned host
// directories (as the image's user it exited "create lock directory: permission denied" on the
// node tier).
func TestComputeDomainPluginRunsAsRoot(t *testing.T) {
	_, plugin := computeDomainPods(t, render(t, kubeVersion, map[string]any{"computeDomains": map[string]any{"enabled": true}}))
	sc := plugin.Containers[0].SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("ComputeDomain plugin container securityContext %+v, want runAsUser 0", sc)
	}
}

// TestComputeDomainDaemonsPullAsTheController: the controller gives the IMEX daemon pods it
// makes the chart's image pull secrets and pull policy, so that daemons pull the driver's image
// from a private registry as the chart's own pods do.
func TestComputeDomainDaemonsPullAsTheController(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want []string
	}{
		{"defaults", nil, []string{"--daemon-image-pull-policy=IfNotPresent"}},
		{"secrets-and-policy", map[string]any{
			"image":            map[string]any{"pullPolicy": "Always"},
			"imagePullSecrets": []any{map[string]any{"name": "registry-a"}, map[string]any{"name": "registry-b"}}},
			[]string{"--daemon-image-pull-policy=Always", "--daemon-image-pull-secrets=registry-a,registry-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := map[string]any{"computeDomains": map[string]any{"enabled": true}}
			for k, v := range tc.vals {
				vals[k] = v
			}
			controller, _ := computeDomainPods(t, render(t, kubeVersion, vals))
			var got []string
			for _, a := range controller.Containers[0].Args {
				if strings.HasPrefix(a, "--daemon-image-pull-") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the controller's pull arguments (-want +got):\n%s", diff)
			}
		})
	}
}
