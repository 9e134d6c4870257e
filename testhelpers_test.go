package gpudra_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/topology"
)

const testNode = "node-1"

// inventory enumerates a fake machine.
func inventory(t testing.TB, machine string, opts ...gputest.Option) *gpu.Inventory {
	t.Helper()
	inv, _ := inventoryAndTopology(t, machine, opts...)
	return inv
}

// inventoryAndTopology enumerates a fake machine and discovers its topology (PCIe roots derived
// from NVML, as the fake has no sysfs).
func inventoryAndTopology(t testing.TB, machine string, opts ...gputest.Option) (*gpu.Inventory, *topology.Topology) {
	t.Helper()
	m, err := gputest.New(machine, opts...)
	if err != nil {
		t.Fatalf("gputest.New(%s): %v", machine, err)
	}
	inv, err := gpu.Enumerate(context.Background(), m)
	if err != nil {
		t.Fatalf("Enumerate(%s): %v", machine, err)
	}
	topo, err := topology.Discover(m, topology.WithoutSysfs())
	if err != nil {
		t.Fatalf("topology.Discover(%s): %v", machine, err)
	}
	return inv, topo
}

// slicesFor builds and renders the ResourceSlices of an inventory.
func slicesFor(t testing.TB, inv *gpu.Inventory, opts ...gpudra.Option) []*resourceapi.ResourceSlice {
	t.Helper()
	b := gpudra.NewBuilder(opts...)
	res, err := b.Build(testNode, inv)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), testNode, res)
	if err != nil {
		t.Fatalf("ResourceSlices: %v", err)
	}
	return slices
}

func allDevices(slices []*resourceapi.ResourceSlice) []resourceapi.Device {
	var out []resourceapi.Device
	for _, s := range slices {
		out = append(out, s.Spec.Devices...)
	}
	return out
}

// workload is what one manifest file asks for: the claims its pods would get (one per pod and
// template reference, replicas counted), plus any DeviceClasses it ships.
type workload struct {
	claims  []*resourceapi.ResourceClaim
	classes []*resourceapi.DeviceClass
}

// loadWorkload reads a multi-document manifest and expands templates the way the
// resourceclaim controller does: one claim per pod (and replica) that references a template.
func loadWorkload(t testing.TB, path string) workload {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var w workload
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	type podRef struct {
		spec     corev1.PodSpec
		replicas int
		name     string
	}
	var pods []podRef
	for i, doc := range splitYAML(data) {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		strict := func(into any) {
			if err := yaml.UnmarshalStrict(doc, into); err != nil {
				t.Fatalf("%s document %d (%s): %v", path, i, meta.Kind, err)
			}
		}
		switch meta.Kind {
		case "ResourceClaim":
			c := &resourceapi.ResourceClaim{}
			strict(c)
			w.claims = append(w.claims, c)
		case "ResourceClaimTemplate":
			tpl := &resourceapi.ResourceClaimTemplate{}
			strict(tpl)
			templates[tpl.Name] = tpl
		case "DeviceClass":
			c := &resourceapi.DeviceClass{}
			strict(c)
			w.classes = append(w.classes, c)
		case "Pod":
			p := &corev1.Pod{}
			strict(p)
			pods = append(pods, podRef{p.Spec, 1, p.Name})
		case "Deployment":
			d := &appsv1.Deployment{}
			strict(d)
			r := 1
			if d.Spec.Replicas != nil {
				r = int(*d.Spec.Replicas)
			}
			pods = append(pods, podRef{d.Spec.Template.Spec, r, d.Name})
		case "Job":
			j := &batchv1.Job{}
			strict(j)
			r := 1
			if j.Spec.Parallelism != nil {
				r = int(*j.Spec.Parallelism)
			}
			pods = append(pods, podRef{j.Spec.Template.Spec, r, j.Name})
		case "":
		default:
			t.Fatalf("%s document %d: unexpected kind %q", path, i, meta.Kind)
		}
	}
	n := 0
	for _, p := range pods {
		for r := 0; r < p.replicas; r++ {
			for _, rc := range p.spec.ResourceClaims {
				if rc.ResourceClaimTemplateName == nil {
					continue
				}
				tpl, ok := templates[*rc.ResourceClaimTemplateName]
				if !ok {
					t.Fatalf("%s: pod %s references unknown template %q", path, p.name, *rc.ResourceClaimTemplateName)
				}
				n++
				w.claims = append(w.claims, &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", tpl.Name, n), Namespace: "default", UID: types.UID(testUID(n))},
					Spec:       tpl.Spec.Spec,
				})
			}
		}
	}
	return w
}

func testUID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func workloadPath(name string) string {
	return filepath.Join("examples", "deploy", "workloads", name)
}
