package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/internal/checkpoint"
)

// twoDrivers is one fake node on which the reference GPU driver (draplugin, on a gputest
// machine) and this driver (draplugin/exclusive) share the CDI spec directory, as two DRA
// drivers on a node share /var/run/cdi.
type twoDrivers struct {
	gpuNode  *draplugintest.Node
	accel    *accelNode
	gpuSpecs *cdi.Writer // the GPU driver's writer, to read and list its specs
	accelCfg exclusive.Config
}

func newTwoDrivers(t *testing.T) *twoDrivers {
	t.Helper()
	n, err := draplugintest.NewNode("a30x4")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	o := fakeNode(t, 2)
	o.cdiRoot = n.CDIDir
	cfg, err := o.pluginConfig()
	if err != nil {
		t.Fatal(err)
	}
	gcfg, err := n.Config()
	if err != nil {
		t.Fatal(err)
	}
	return &twoDrivers{gpuNode: n, accel: o, gpuSpecs: gcfg.CDIWriter, accelCfg: cfg}
}

// startGPU starts the GPU driver's plugin as its start does (draplugin.New, then Reconcile).
func (d *twoDrivers) startGPU(t *testing.T) (*draplugin.Plugin, *draplugin.ReconcileReport) {
	t.Helper()
	p, err := d.gpuNode.NewPlugin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rep, err := p.Reconcile(t.Context())
	if err != nil {
		t.Fatalf("GPU driver: reconcile: %v", err)
	}
	return p, rep
}

// startAccel starts this driver's plugin as serve does (exclusive.New, then Reconcile).
func (d *twoDrivers) startAccel(t *testing.T) (*exclusive.Plugin, *exclusive.ReconcileReport) {
	t.Helper()
	p, _ := d.accel.newPlugin(t, testhooks.Hooks{})
	rep, err := p.Reconcile(t.Context())
	if err != nil {
		t.Fatalf("accel driver: reconcile: %v", err)
	}
	return p, rep
}

// specsOnNode are the claim UIDs whose spec file each driver's writer names (Writer.SpecPath)
// in the shared directory, read from the directory itself, not through Writer.List.
type specsOnNode struct{ GPU, Accel []string }

func (d *twoDrivers) specs(t *testing.T) specsOnNode {
	t.Helper()
	entries, err := os.ReadDir(d.gpuNode.CDIDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var got specsOnNode
	for _, e := range entries {
		uid := e.Name()[strings.LastIndex(e.Name(), "_")+1:]
		uid = strings.TrimSuffix(uid, ".json")
		gp, gerr := d.gpuSpecs.SpecPath(uid)
		ap, aerr := d.accelCfg.CDIWriter.SpecPath(uid)
		switch path := filepath.Join(d.gpuNode.CDIDir, e.Name()); {
		case gerr == nil && path == gp:
			got.GPU = append(got.GPU, uid)
		case aerr == nil && path == ap:
			got.Accel = append(got.Accel, uid)
		default:
			t.Errorf("spec directory holds %s, a file of neither driver", e.Name())
		}
	}
	slices.Sort(got.GPU)
	slices.Sort(got.Accel)
	return got
}

// reconciled is what the two restarted drivers report about specs.
type reconciled struct {
	GPUPruned, GPUAdopted, GPUNotAdopted       []string
	AccelPruned, AccelAdopted, AccelNotAdopted []string
}

// orphanSpec writes, with w, a spec of a claim that no checkpoint holds, for one device.
func orphanSpec(t *testing.T, w *cdi.Writer, uid, device string) {
	t.Helper()
	cs, err := cdi.NewClaimSpec(w.Kind(), uid, specs.ContainerEdits{},
		[]cdi.DeviceEdits{{Name: device, Edits: specs.ContainerEdits{Env: []string{"ORPHAN=1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(cs); err != nil {
		t.Fatal(err)
	}
}

// TestSharesCDIDirectoryWithGPUDriver runs the reference GPU driver and this driver on one node
// with one CDI spec directory. Each prepares a claim of its own, and both prepare a claim
// allocated devices of both drivers (the same claim UID, two specs). Then, as each case says,
// checkpoints are lost, claims unprepared or orphan specs left, and both drivers restart:
// reconciliation at start removes the orphan specs of its own driver only, adopts only its own
// specs, and never prunes a spec of the other driver.
func TestSharesCDIDirectoryWithGPUDriver(t *testing.T) {
	gpuOnly, accelOnly, both := draplugintest.UID("gpu-only"), draplugintest.UID("accel-only"), draplugintest.UID("both")
	gpuOrphan, accelOrphan := string(draplugintest.UID("gpu-orphan")), string(draplugintest.UID("accel-orphan"))
	sorted := func(uids ...string) []string { return slices.Sorted(slices.Values(uids)) }
	cases := []struct {
		name string
		// loseGPU and loseAccel remove a driver's state directory (checkpoint) before the restart.
		loseGPU, loseAccel bool
		// unprepareGPU and unprepareAccel are claims each driver unprepares before the restart.
		unprepareGPU, unprepareAccel []string
		// orphans leaves a spec of a claim no checkpoint holds, of each driver, before the restart.
		orphans bool
		want    specsOnNode
		report  reconciled
	}{
		{
			name: "restart",
			want: specsOnNode{GPU: sorted(string(gpuOnly), string(both)), Accel: sorted(string(accelOnly), string(both))},
		},
		{
			name: "orphans of each driver", orphans: true,
			want:   specsOnNode{GPU: sorted(string(gpuOnly), string(both)), Accel: sorted(string(accelOnly), string(both))},
			report: reconciled{GPUPruned: []string{gpuOrphan}, AccelPruned: []string{accelOrphan}},
		},
		{
			name: "GPU driver unprepares everything", unprepareGPU: []string{"gpu-only", "both"}, orphans: true,
			want:   specsOnNode{Accel: sorted(string(accelOnly), string(both))},
			report: reconciled{GPUPruned: []string{gpuOrphan}, AccelPruned: []string{accelOrphan}},
		},
		{
			name: "accel driver unprepares everything", unprepareAccel: []string{"accel-only", "both"}, orphans: true,
			want:   specsOnNode{GPU: sorted(string(gpuOnly), string(both))},
			report: reconciled{GPUPruned: []string{gpuOrphan}, AccelPruned: []string{accelOrphan}},
		},
		{
			name: "both checkpoints lost", loseGPU: true, loseAccel: true,
			want: specsOnNode{GPU: sorted(string(gpuOnly), string(both)), Accel: sorted(string(accelOnly), string(both))},
			report: reconciled{GPUAdopted: sorted(string(gpuOnly), string(both)),
				AccelAdopted: sorted(string(accelOnly), string(both))},
		},
		{
			name: "GPU checkpoint lost, accel driver unprepares the shared claim", loseGPU: true, unprepareAccel: []string{"both"},
			want:   specsOnNode{GPU: sorted(string(gpuOnly), string(both)), Accel: []string{string(accelOnly)}},
			report: reconciled{GPUAdopted: sorted(string(gpuOnly), string(both))},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newTwoDrivers(t)
			gp, _ := d.startGPU(t)
			ap, _ := d.startAccel(t)

			claims := map[string]*resourceapi.ResourceClaim{}
			for _, name := range []string{"gpu-only", "both"} {
				c, err := d.gpuNode.Allocate(t.Context(), draplugintest.Claim(name, gpudra.DefaultDriverName, "", ""))
				if err != nil {
					t.Fatal(err)
				}
				claims[name] = c
			}
			claims["accel-only"] = allocated("accel-only", testNode, "accel-0")
			claims["both"].Status.Allocation.Devices.Results = append(claims["both"].Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "accel", Driver: driverName, Pool: testNode, Device: "accel-1"})
			for _, name := range []string{"gpu-only", "both"} {
				if _, err := draplugintest.Prepare(t.Context(), gp, claims[name]); err != nil {
					t.Fatalf("GPU driver: prepare %s: %v", name, err)
				}
			}
			for _, name := range []string{"accel-only", "both"} {
				if _, err := draplugintest.Prepare(t.Context(), ap, claims[name]); err != nil {
					t.Fatalf("accel driver: prepare %s: %v", name, err)
				}
			}
			if got, want := d.specs(t), (specsOnNode{GPU: sorted(string(gpuOnly), string(both)), Accel: sorted(string(accelOnly), string(both))}); !cmp.Equal(want, got) {
				t.Fatalf("specs after the prepares (-want +got):\n%s", cmp.Diff(want, got))
			}
			for _, name := range tc.unprepareGPU {
				if err := draplugintest.Unprepare(t.Context(), gp, claims[name]); err != nil {
					t.Fatalf("GPU driver: unprepare %s: %v", name, err)
				}
			}
			for _, name := range tc.unprepareAccel {
				if err := draplugintest.Unprepare(t.Context(), ap, claims[name]); err != nil {
					t.Fatalf("accel driver: unprepare %s: %v", name, err)
				}
			}
			if tc.orphans {
				orphanSpec(t, d.gpuSpecs, gpuOrphan, "gpu-0")
				orphanSpec(t, d.accelCfg.CDIWriter, accelOrphan, "accel-1")
			}
			_ = gp.Close()
			_ = ap.Close()
			loseCheckpoint(t, tc.loseGPU, d.gpuNode.StateDir)
			loseCheckpoint(t, tc.loseAccel, d.accel.stateDir)

			// Each driver restarts twice, the other running: the second start finds the
			// other driver's specs after its own reconciliation ran.
			var got reconciled
			for range 2 {
				gp, grep := d.startGPU(t)
				ap, arep := d.startAccel(t)
				got.GPUPruned = append(got.GPUPruned, grep.SpecsPruned...)
				got.GPUAdopted = append(got.GPUAdopted, grep.Adopted...)
				got.GPUNotAdopted = append(got.GPUNotAdopted, grep.NotAdopted...)
				got.AccelPruned = append(got.AccelPruned, arep.SpecsPruned...)
				got.AccelAdopted = append(got.AccelAdopted, arep.Adopted...)
				got.AccelNotAdopted = append(got.AccelNotAdopted, arep.NotAdopted...)
				_ = gp.Close()
				_ = ap.Close()
			}
			if diff := cmp.Diff(tc.report, got); diff != "" {
				t.Errorf("reconciliation reports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, d.specs(t)); diff != "" {
				t.Errorf("specs after the restarts (-want +got):\n%s", diff)
			}
			// The specs kept are the drivers' own, each of its own kind, as the runtime reads them.
			for _, uid := range d.specs(t).GPU {
				if s, err := d.gpuSpecs.Read(uid); err != nil || s.Kind != d.gpuSpecs.Kind() {
					t.Errorf("GPU spec of %s: %v, kind %v", uid, err, s)
				}
			}
			for _, uid := range d.specs(t).Accel {
				if s, err := d.accelCfg.CDIWriter.Read(uid); err != nil || s.Kind != d.accelCfg.CDIWriter.Kind() {
					t.Errorf("accel spec of %s: %v, kind %v", uid, err, s)
				}
			}

			// Kubelet unprepares the claims still prepared: each driver removes its specs only.
			gp, _ = d.startGPU(t)
			ap, _ = d.startAccel(t)
			for _, uid := range tc.want.GPU {
				if err := unprepareUID(t.Context(), gp, uid); err != nil {
					t.Errorf("GPU driver: unprepare %s: %v", uid, err)
				}
			}
			if diff := cmp.Diff(specsOnNode{Accel: tc.want.Accel}, d.specs(t)); diff != "" {
				t.Errorf("specs after the GPU driver unprepared its claims (-want +got):\n%s", diff)
			}
			for _, uid := range tc.want.Accel {
				if err := unprepareUID(t.Context(), ap, uid); err != nil {
					t.Errorf("accel driver: unprepare %s: %v", uid, err)
				}
			}
			if diff := cmp.Diff(specsOnNode{}, d.specs(t)); diff != "" {
				t.Errorf("specs after both drivers unprepared their claims (-want +got):\n%s", diff)
			}
		})
	}
}

// loseCheckpoint removes the checkpoint in stateDir when lose is set, as a wiped state
// directory does.
func loseCheckpoint(t *testing.T, lose bool, stateDir string) {
	t.Helper()
	if !lose {
		return
	}
	if err := os.Remove(filepath.Join(stateDir, checkpoint.FileName)); err != nil {
		t.Fatal(err)
	}
}

// unprepareUID unprepares a claim known by UID only, as kubelet does after a restart.
func unprepareUID(ctx context.Context, p kubeletplugin.DRAPlugin, uid string) error {
	res, err := p.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	if err != nil {
		return err
	}
	return res[types.UID(uid)]
}
