package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework/kubenode/report"
)

// capsMajor is the nvidia-caps major of the fake driver root's /proc/devices (cditest).
const capsMajor = 237

// fakeState is the part of the fake control's GET /state the tests read.
type fakeState struct {
	GPUs []struct {
		Index     int               `json:"index"`
		UUID      string            `json:"uuid"`
		Instances []json.RawMessage `json:"instances"`
	} `json:"gpus"`
}

// fakeControl calls the fake machine's test controls in the plugin pod that serves the node
// (the newest ready one: during a rolling update the old pod no longer gets kubelet's calls).
func (s *Suite) fakeControl(t *testing.T, method, path string, out any) {
	t.Helper()
	pod, err := s.servingPluginPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sock := s.fakeControlSocket(string(pod.UID))
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, err := http.NewRequest(method, "http://fake-control"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("fake control %s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fake control %s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("fake control %s %s: %v", method, path, err)
		}
	}
}

// instances counts the fake machine's MIG instances per GPU index.
func (s *Suite) instances(t *testing.T) map[int]int {
	t.Helper()
	var st fakeState
	s.fakeControl(t, http.MethodGet, "/state", &st)
	n := map[int]int{}
	for _, g := range st.GPUs {
		if len(g.Instances) > 0 {
			n[g.Index] = len(g.Instances)
		}
	}
	return n
}

// reinstall installs the chart with values changed from the suite's defaults, and restores
// the defaults when the test ends.
func (s *Suite) reinstall(ctx context.Context, t *testing.T, extra map[string]any) {
	t.Helper()
	s.reinstallAdapted(ctx, t, extra, nil)
}

// reinstallAdapted is reinstall with a change to the DaemonSet's pod spec (installChartAdapted);
// the suite's own chart, unchanged, is restored when the test ends.
func (s *Suite) reinstallAdapted(ctx context.Context, t *testing.T, extra map[string]any, adapt func(*corev1.PodSpec)) {
	t.Helper()
	// Restored even when the install fails half way: the next tests need the suite's chart.
	t.Cleanup(func() {
		if err := s.installChart(context.Background(), nil); err != nil {
			t.Errorf("restore the chart's values: %v", err)
		}
	})
	if err := s.installChartAdapted(ctx, extra, adapt); err != nil {
		t.Fatalf("%v\n%s", err, s.pluginLogTails(ctx))
	}
}

// pluginLogTails returns the last lines the plugin container of each plugin pod on the node
// logged (every attempt, restarts included), for errors: why a plugin did not become Ready.
func (s *Suite) pluginLogTails(ctx context.Context) string {
	pods, err := s.pluginPods(ctx)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range pods {
		log, err := s.Node.Kubelet.ContainerLog(&pods[i], "plugin")
		if err != nil {
			fmt.Fprintf(&b, "plugin pod %s: no log: %v\n", pods[i].Name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
		fmt.Fprintf(&b, "plugin pod %s, last lines of its log:\n  %s\n", pods[i].Name, strings.Join(lines[max(0, len(lines)-8):], "\n  "))
	}
	return b.String()
}

// migClaimTemplate asks for one MIG device of profile.
func (s *Suite) migClaimTemplate(ctx context.Context, t *testing.T, ns, name, profile string) {
	t.Helper()
	spec := claimSpec("mig.nvidia.com", 1)
	spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].profile == '%s'", driverName, profile)}}}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	if _, err := s.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkMIGNodes checks that a container given the MIG device dev sees its parent GPU's node,
// exactly one GPU-instance and one compute-instance capability node of that GPU instance (per
// the driver root's mig-minors file, read here independently of the plugin), and the control
// nodes. In the fake driver root a GPU's minor is its index.
func (s *Suite) checkMIGNodes(t *testing.T, dev resourceapi.Device, got []report.Device) {
	t.Helper()
	minors := s.migMinors(t)
	parent := intAttr(dev, "parentIndex")
	var caps []string
	var gpuNodes []string
	for _, d := range got {
		switch {
		case strings.HasPrefix(d.Path, "/dev/nvidia-caps/"):
			if d.Major != capsMajor {
				t.Errorf("%s: major %d, want %d", d.Path, d.Major, capsMajor)
			}
			caps = append(caps, minors[d.Minor])
		case strings.TrimLeft(strings.TrimPrefix(d.Path, "/dev/nvidia"), "0123456789") == "" && d.Path != "/dev/nvidia":
			gpuNodes = append(gpuNodes, d.Path)
		}
	}
	if want := []string{fmt.Sprintf("/dev/nvidia%d", parent)}; strings.Join(gpuNodes, ",") != want[0] {
		t.Errorf("GPU nodes %v, want %v (the MIG device's parent)", gpuNodes, want)
	}
	if len(caps) != 2 {
		t.Fatalf("capability nodes %v, want a GPU instance's and one of its compute instances'", caps)
	}
	gi, ci := caps[0], caps[1]
	if strings.Count(gi, "/") > strings.Count(ci, "/") {
		gi, ci = ci, gi
	}
	prefix := fmt.Sprintf("gpu%d/gi", parent)
	if !strings.HasPrefix(gi, prefix) || !strings.HasSuffix(gi, "/access") || !strings.HasPrefix(ci, strings.TrimSuffix(gi, "access")+"ci") {
		t.Errorf("capability nodes are %q and %q, want gpu%d/gi<G>/access and gpu%d/gi<G>/ci<C>/access", gi, ci, parent, parent)
	}
	for _, c := range controlNodes {
		found := false
		for _, d := range got {
			found = found || (d.Path == c.Path && d.Major == c.Major && d.Minor == c.Minor)
		}
		if !found {
			t.Errorf("control node %s missing", c.Path)
		}
	}
}

// migMinors reads the driver root's /proc/driver/nvidia-caps/mig-minors: minor → key.
func (s *Suite) migMinors(t *testing.T) map[uint32]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.DriverRoot, "proc", "driver", "nvidia-caps", "mig-minors"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint32]string{}
	for _, line := range strings.Split(string(data), "\n") {
		var key string
		var minor uint32
		if _, err := fmt.Sscanf(line, "%s %d", &key, &minor); err == nil {
			m[minor] = key
		}
	}
	return m
}

// TestNodeDynamicMIG: with dynamicMIG on, a pod asking for a 1g.5gb partition runs; the plugin
// created the MIG instance and the container sees its parent GPU and capability nodes; after
// the pod is gone the instance is destroyed and the claim's spec removed.
func TestNodeDynamicMIG(t *testing.T) {
	ctx := context.Background()
	s := suite
	s.reinstall(ctx, t, map[string]any{"dynamicMIG": true})
	ns := s.namespace(ctx, t)
	s.migClaimTemplate(ctx, t, ns, "mig", "1g.5gb")
	if n := s.instances(t); len(n) != 0 {
		t.Fatalf("MIG instances before the pod: %v, want none", n)
	}
	pod := s.runPod(ctx, t, workloadPod(ns, "mig", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	dev := s.device(ctx, t, devs[0])
	s.checkMIGNodes(t, dev, s.report(ctx, t, pod, "main").Devices)
	parent := int(intAttr(dev, "parentIndex"))
	if n := s.instances(t); len(n) != 1 || n[parent] != 1 {
		t.Errorf("MIG instances while the pod runs: %v, want one on GPU %d", n, parent)
	}
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
	if n := s.instances(t); len(n) != 0 {
		t.Errorf("MIG instances after unprepare: %v, want none", n)
	}
}

// TestNodeStaticMIG: with the GPUs partitioned before the plugin starts (mig-parted's
// all-balanced), a pod asking for a 1g.5gb device runs on one of the existing instances and
// sees its nodes; unprepare leaves the instance in place.
func TestNodeStaticMIG(t *testing.T) {
	ctx := context.Background()
	s := suite
	s.reinstall(ctx, t, map[string]any{"fakeMachine": map[string]any{"name": machine, "driverRoot": s.DriverRoot, "migConfig": "all-balanced"}})
	ns := s.namespace(ctx, t)
	s.migClaimTemplate(ctx, t, ns, "mig", "1g.5gb")
	before := s.instances(t)
	pod := s.runPod(ctx, t, workloadPod(ns, "mig", corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("mig")}, "main"))
	claim, devs := s.allocatedDevices(ctx, t, pod, "gpu")
	s.checkMIGNodes(t, s.device(ctx, t, devs[0]), s.report(ctx, t, pod, "main").Devices)
	s.deletePod(ctx, t, pod)
	s.waitUnprepared(ctx, t, string(claim.UID))
	if after := s.instances(t); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("MIG instances per GPU %v after unprepare, want the static layout's %v unchanged", after, before)
	}
}
