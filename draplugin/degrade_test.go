package draplugin_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/internal/slicetest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/apifeatures/*.yaml from the current output")

// goldenDir holds one golden file per distinct output of TestPublishedSlicesPerGateCombination.
// What the plugin publishes depends only on the features its slices use (wantFeatures), not on
// which unused gates are off, so the file is named after those features (goldenName) and the
// combinations that use the same features share it.
var goldenDir = filepath.Join("testdata", "apifeatures")

// goldenName is the golden file of the combination of gates off: "uses-" and the features
// wantFeatures says the slices use, or "uses-none".
func goldenName(off []gpudra.Feature) string {
	short := map[gpudra.Feature]string{fPart: "partitionable", fCons: "consumable", fTaint: "taints", fBind: "binding"}
	parts := []string{"uses"}
	for _, f := range wantFeatures(off) {
		parts = append(parts, short[f])
	}
	if len(parts) == 1 {
		parts = append(parts, "none")
	}
	return strings.Join(parts, "-") + ".yaml"
}

// asked are the slice options of the degrade tests: every feature the builder can use. Dynamic
// MIG is limited to 3g.20gb, which an A100-SXM4-40GB places at memory slices 0 and 4 (NVIDIA's
// MIG user guide), to keep the golden files short.
func asked() draplugintest.NodeOption {
	return draplugintest.WithSliceOptions(gpudra.WithDynamicMIG(nil), gpudra.WithDynamicMIGProfiles("3g.20gb"),
		gpudra.WithConsumableMemory(gpudra.ConsumableMemory{}))
}

// bufferedCtx returns a context whose logger keeps what it logs, and a function that returns
// the log.
func bufferedCtx(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func() string {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	}
}

// wantFeatures are the features the degrade tests' slices must use on a DGX A100 (8 MIG-capable
// GPUs, MIG off) with GPU 3 unhealthy when the server drops off: partitionable devices unless
// dropped; consumable capacity only when dynamic MIG is off (the builder applies consumable
// memory to full GPUs not partitioned by dynamic MIG) and it is kept; taints unless dropped;
// binding conditions never (the builder publishes none).
func wantFeatures(off []gpudra.Feature) []gpudra.Feature {
	var want []gpudra.Feature
	if !contains(off, fPart) {
		want = append(want, fPart)
	}
	if contains(off, fPart) && !contains(off, fCons) {
		want = append(want, fCons)
	}
	if !contains(off, fTaint) {
		want = append(want, fTaint)
	}
	return want
}

// TestPublishedSlicesPerGateCombination negotiates with a fake API server for every combination
// of gates turned off, builds the plugin with the result and compares what it publishes with a
// golden file (goldenName: one per distinct output, shared by the combinations whose slices use
// the same features). Independently of the golden files: the server would store the
// slices as they are (zero dropped fields), every feature it keeps that the driver asked for is
// still used, dynamic MIG falls back to full GPUs, and New logs exactly one line about it.
func TestPublishedSlicesPerGateCombination(t *testing.T) {
	checkGoldenFiles(t)
	written := map[string]string{} // with -update: the golden files written, by path
	for _, off := range gateSubsets() {
		t.Run(subsetName(off), func(t *testing.T) {
			ctx, logs := bufferedCtx(t)
			features, err := draplugin.NegotiateFeatures(ctx, draplugintest.NewAPIClient(off), gpudra.DefaultDriverName, draplugintest.DefaultNodeName)
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvWith(t, "dgx-a100-40gb", asked())
			p, err := e.NewPlugin(ctx, func(c *draplugin.Config) {
				c.APIFeatures = features
				c.Now = func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }
			})
			if err != nil {
				t.Fatal(err)
			}
			checkNegotiationLog(t, logs(), off)
			if err := p.MarkUnhealthy(ctx, "gpu-3", "xid-79", "injected"); err != nil {
				t.Fatal(err)
			}
			pool, err := p.Resources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := gpudra.ResourceSlices(p.DriverName(), e.Name, pool)
			if err != nil {
				t.Fatal(err)
			}
			checkDegraded(t, rs, off)
			compareGolden(t, filepath.Join(goldenDir, goldenName(off)), rs, written)
		})
	}
}

// checkDegraded checks the slices against the rules of wantFeatures, without golden files.
func checkDegraded(t *testing.T, rs []*resourceapi.ResourceSlice, off []gpudra.Feature) {
	t.Helper()
	for _, s := range rs {
		if diff := cmp.Diff(s, draplugintest.DropDisabledFields(s, off...)); diff != "" {
			t.Errorf("slice %s: the API server would drop (-published +stored):\n%s", s.Name, diff)
		}
	}
	if diff := cmp.Diff(wantFeatures(off), slicetest.FeaturesIn(rs)); diff != "" {
		t.Errorf("features in the slices (-want +got):\n%s", diff)
	}
	wantKinds := map[string]int{"gpu": 8, "partition": 16}
	if contains(off, fPart) {
		wantKinds = map[string]int{"gpu": 8}
	}
	if diff := cmp.Diff(wantKinds, slicetest.DeviceKinds(rs)); diff != "" {
		t.Errorf("devices by kind (-want +got):\n%s", diff)
	}
	for _, s := range rs {
		for _, d := range s.Spec.Devices {
			tainted := len(d.Taints) > 0
			if want := !contains(off, fTaint) && strings.HasPrefix(d.Name, "gpu-3"); tainted != want {
				t.Errorf("device %s has taints %v, want tainted=%v (GPU 3 unhealthy)", d.Name, d.Taints, want)
			}
		}
	}
}

// checkNegotiationLog checks that New logged one line about the negotiation, naming every
// dropped gate and what the driver turned off because of it.
func checkNegotiationLog(t *testing.T, logs string, off []gpudra.Feature) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "optional ResourceSlice feature") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines about the negotiation, want 1:\n%s", len(lines), logs)
	}
	want := []string{"keeps every optional ResourceSlice feature"}
	if len(off) > 0 {
		want = []string{"drops optional ResourceSlice features"}
		for _, f := range off {
			want = append(want, string(f)+" (the API server dropped spec.")
		}
	}
	if contains(off, fPart) {
		want = append(want, "dynamic MIG: MIG-capable GPUs are published as they are partitioned now")
	}
	if contains(off, fCons) {
		// Asked for, so turned off, even where dynamic MIG left it no full GPU to share.
		want = append(want, "consumable memory: full GPUs are published for exclusive use")
	}
	if contains(off, fTaint) {
		want = append(want, "health taints: unhealthy devices are reported only through WatchHealthStatus")
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("the log line does not say %q:\n%s", w, lines[0])
		}
	}
	if !contains(off, fCons) && strings.Contains(lines[0], "consumable memory:") {
		t.Errorf("the log line says consumable memory was turned off, but the server keeps consumable capacity:\n%s", lines[0])
	}
}

// checkGoldenFiles fails on a golden file that no combination of gates compares with (a stale
// one, left by a renamed combination) and on a combination without its file.
func checkGoldenFiles(t *testing.T) {
	t.Helper()
	want := map[string]bool{}
	for _, off := range gateSubsets() {
		want[goldenName(off)] = true
	}
	entries, err := os.ReadDir(goldenDir)
	if err != nil && !*updateGolden {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name()] = true
		if !want[e.Name()] {
			t.Errorf("%s is compared with no combination of gates: remove it", filepath.Join(goldenDir, e.Name()))
		}
	}
	for name := range want {
		if !have[name] && !*updateGolden {
			t.Errorf("%s is missing (run go test ./draplugin -run TestPublishedSlicesPerGateCombination -update)", filepath.Join(goldenDir, name))
		}
	}
}

// compareGolden compares the slices, as a YAML stream, with a golden file (-update rewrites it).
// With -update it writes the file, and fails when another combination sharing the file wrote
// something else in this run (written holds what each path got).
func compareGolden(t *testing.T, golden string, rs []*resourceapi.ResourceSlice, written map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	for _, s := range rs {
		y, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		buf.WriteString("---\n")
		buf.Write(y)
	}
	if *updateGolden {
		if prev, ok := written[golden]; ok && prev != buf.String() {
			t.Errorf("%s: combinations using the same features publish different slices: the golden files cannot be shared (-earlier +this):\n%s",
				golden, cmp.Diff(prev, buf.String()))
		}
		written[golden] = buf.String()
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./draplugin -run TestPublishedSlicesPerGateCombination -update)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s (-want +got):\n%s", golden, diff)
	}
}

// TestServePublishesWhatTheServerKeeps runs the plugin's real publishing (the kubelet-plugin
// helper's ResourceSlice controller) against a fake API server with partitionable devices and
// consumable capacity off. Negotiated, the stored slices are exactly those the plugin builds and
// the helper reports no dropped fields; without negotiation the server strips the dynamic MIG
// partitions' counters (which would let the scheduler give out overlapping partitions) and the
// helper reports it.
func TestServePublishesWhatTheServerKeeps(t *testing.T) {
	off := []gpudra.Feature{fPart, fCons}
	for _, negotiate := range []bool{true, false} {
		t.Run(map[bool]string{true: "negotiated", false: "not negotiated"}[negotiate], func(t *testing.T) {
			ctx, logs := bufferedCtx(t)
			e := newEnvWith(t, "dgx-a100-40gb", asked(), draplugintest.WithAPIFeaturesOff(off...))
			var features *draplugin.APIFeatures
			if negotiate {
				var err error
				if features, err = draplugin.NegotiateFeatures(ctx, draplugintest.NewAPIClient(off), gpudra.DefaultDriverName, e.Name); err != nil {
					t.Fatal(err)
				}
			}
			p, err := e.NewPlugin(ctx, func(c *draplugin.Config) { c.APIFeatures = features })
			if err != nil {
				t.Fatal(err)
			}
			srv, err := e.Serve(ctx, p, draplugin.StartConfig{NoHealthMonitor: true})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			pool, err := p.Resources(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := sliceSpecs(t, pool)
			var stored []string
			waitFor(t, func() bool {
				list, err := srv.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				stored = storedSpecs(t, list.Items)
				return len(stored) == len(want)
			}, "the pool's slices")
			droppedReported := func() bool { return strings.Contains(logs(), "some fields were dropped by the apiserver") }
			if negotiate {
				if diff := cmp.Diff(want, stored); diff != "" {
					t.Errorf("stored slices differ from the plugin's (-plugin +stored):\n%s", diff)
				}
				time.Sleep(100 * time.Millisecond) // the helper reports after storing
				if droppedReported() {
					t.Errorf("the kubelet-plugin helper reported dropped fields:\n%s", logs())
				}
				return
			}
			if cmp.Equal(want, stored) {
				t.Error("without negotiation the server stored the slices unchanged; the fake server should have dropped the counters")
			}
			waitFor(t, droppedReported, "the helper's DroppedFieldsError")
		})
	}
}

// sliceSpecs are the pool's slices as YAML specs, sorted (the helper names slices itself).
func sliceSpecs(t *testing.T, pool *gpudra.Pool) []string {
	t.Helper()
	rs, err := gpudra.ResourceSlices(gpudra.DefaultDriverName, draplugintest.DefaultNodeName, pool)
	if err != nil {
		t.Fatal(err)
	}
	items := make([]resourceapi.ResourceSlice, 0, len(rs))
	for _, s := range rs {
		items = append(items, *s)
	}
	return storedSpecs(t, items)
}

// storedSpecs are the devices and counters of slices as YAML, sorted.
func storedSpecs(t *testing.T, items []resourceapi.ResourceSlice) []string {
	t.Helper()
	out := make([]string, 0, len(items))
	for _, s := range items {
		y, err := yaml.Marshal(resourceapi.ResourceSliceSpec{Devices: s.Spec.Devices, SharedCounters: s.Spec.SharedCounters})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(y))
	}
	sort.Strings(out)
	return slices.Clip(out)
}
