package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode"
)

// TestNodeGlibcDriverRoot (issue 27): on a host whose C library is not the image's, the
// plugin's container still starts. The driver root here carries a libc.so.6 that no program of
// the image can run with (a stand-in for another glibc release's, which fails the same way:
// "undefined symbol ..., version GLIBC_PRIVATE"). A pod made from the chart's real-GPU DaemonSet
// (its image, command, environment and mounts) runs the driver's `version`, which loads NVML
// from the driver root by path; it must reach main and exit 0. With the driver root's library
// directories in LD_LIBRARY_PATH, as the chart once set, the image's loader picks the driver
// root's libc and the process dies before main with exit 127.
func TestNodeGlibcDriverRoot(t *testing.T) {
	ctx := context.Background()
	s := suite
	root := filepath.Join(s.Node.Dir, "glibc-root")
	if err := kubenode.FakeDriverRoot(root, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	foreignLibc(t, filepath.Join(root, "usr", "lib", "x86_64-linux-gnu"))

	// The chart as installed on a node with a real driver at root.
	values := s.chartValues(map[string]any{"nvidiaDriverRoot": root, "fakeMachine": map[string]any{"name": ""}})
	objs, err := framework.RenderChart(filepath.Join(s.Repo, chartPath), s.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := framework.DaemonSetFrom(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.adaptToNode(&ds.Spec.Template.Spec); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "glibc-version", Namespace: releaseNamespace},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = nodeName
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	c := &pod.Spec.Containers[0]
	c.Command = []string{"gpu-dra-driver", "version"}
	c.Args = []string{"--driver-root=/driver-root"}
	c.StartupProbe, c.LivenessProbe, c.ReadinessProbe = nil, nil, nil
	if _, err := s.Client.CoreV1().Pods(releaseNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.CoreV1().Pods(releaseNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	var done *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		done, err = s.Client.CoreV1().Pods(releaseNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return done.Status.Phase == corev1.PodSucceeded || done.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod %s did not finish: %v (%s)", pod.Name, err, containerStates(done))
	}
	log, err := s.Node.Kubelet.ContainerLog(done, c.Name)
	if err != nil {
		t.Fatalf("log of pod %s: %v", pod.Name, err)
	}
	if done.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("the driver did not start with a driver root whose libc is not the image's: %s %s: %s\nlog:\n%s", containerStates(done), done.Status.Reason, done.Status.Message, log)
	}
	if !strings.Contains(log, "NVML") {
		t.Errorf("`version` printed no NVML line:\n%s", log)
	}
}

// foreignLibc puts a libc.so.6 into dir that no program of this machine's glibc can run with:
// it has the soname and none of the symbols.
func foreignLibc(t *testing.T, dir string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "libc.c")
	if err := os.WriteFile(src, []byte("int not_the_c_library;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("cc", "-shared", "-nostdlib", "-Wl,-soname,libc.so.6", "-o", filepath.Join(dir, "libc.so.6"), src).CombinedOutput()
	if err != nil {
		t.Fatalf("build a foreign libc.so.6 (cc is needed by make build too): %v\n%s", err, out)
	}
}
