package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "glibc-version", Namespace: releaseNamespace},
		Spec:       s.realModePodSpec(t, root),
	}
	c := &pod.Spec.Containers[0]
	c.Command = []string{"gpu-dra-driver", "version"}
	c.Args = []string{"--driver-root=/driver-root"}
	if _, err := s.Client.CoreV1().Pods(releaseNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.CoreV1().Pods(releaseNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})
	done := s.waitFinished(ctx, t, pod.Name)
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
