package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/exclusive/exclusivetest"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/simulate"
)

const testNode = "node-1"

// accelNode is a fake node (package exclusivetest: directories, boot ID, kubelet, API server)
// with imaginary accelerators under root/ in its directory, and the options serve gets there.
type accelNode struct {
	*options
	node *exclusivetest.Node
}

// fakeNode lays out n imaginary accelerators of model A1 on a new fake node; the node is removed
// when the test ends.
func fakeNode(t *testing.T, n int) *accelNode {
	node, err := exclusivetest.NewNode(exclusivetest.WithNodeName(testNode))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Close() })
	o := onNode(node)
	for i := range n {
		sys := filepath.Join(o.root, "sys", "class", "accel", fmt.Sprintf("accel%d", i))
		for _, d := range []string{filepath.Join(o.root, "dev"), sys} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for path, content := range map[string]string{filepath.Join(o.root, "dev", fmt.Sprintf("accel%d", i)): "", filepath.Join(sys, "model"): "A1\n"} {
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return o
}

// onNode is the fake node with serve's options for its directories (the accelerators are
// under root/ in the node's directory).
func onNode(node *exclusivetest.Node) *accelNode {
	return &accelNode{node: node, options: &options{nodeName: node.Name, root: filepath.Join(node.Dir, "root"), cdiRoot: node.CDIDir,
		stateDir: node.StateDir, pluginDir: node.PluginDir, registrarDir: node.RegistrarDir}}
}

// owner is the claim accel<n> is reserved for, read as the imaginary kernel driver keeps it.
func (o *options) owner(t *testing.T, n int) types.UID {
	u, err := accelDriver{root: o.root}.owner(n)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// newPlugin builds the plugin serve builds, with test hooks and the fake node's boot ID; it is
// closed when the test ends.
func (o *accelNode) newPlugin(t *testing.T, hooks testhooks.Hooks) (*exclusive.Plugin, exclusive.Config) {
	cfg, err := o.pluginConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.TestHooks = hooks
	if cfg, err = o.node.Config(cfg); err != nil {
		t.Fatal(err)
	}
	p, err := exclusive.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, cfg
}

// TestServePublishAllocatePrepare runs the driver as serve does against a fake API server and
// talks to it as kubelet: the published slices are allocated by the scheduler's allocator, the
// claim is prepared through the DRA socket, its CDI spec gives the container the chosen
// accelerator, a second prepare is answered the same, and unprepare releases the accelerator
// and removes the spec.
func TestServePublishAllocatePrepare(t *testing.T) {
	o := fakeNode(t, 4)
	p, cfg := o.newPlugin(t, testhooks.Hooks{})
	srv, err := o.node.Serve(t.Context(), p, exclusive.StartConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	slices, err := srv.ResourceSlices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	claim, err := simulate.New(testNode, []*resourceapi.DeviceClass{exclusivetest.DeviceClass(driverName)}, slices).Allocate(t.Context(),
		kubelettest.Claim("train", driverName, `device.attributes["`+driverName+`"].index == 2`))
	if err != nil {
		t.Fatal(err)
	}
	wantID := driverName + "/claim=" + string(claim.UID) + "-accel-2"
	for i := range 2 {
		resp, err := srv.Prepare(t.Context(), claim)
		if err != nil {
			t.Fatal(err)
		}
		got := resp.Claims[string(claim.UID)]
		if got.Error != "" || len(got.Devices) != 1 || !cmp.Equal(got.Devices[0].CdiDeviceIds, []string{wantID}) {
			t.Fatalf("prepare %d: %+v, want device %s", i, got, wantID)
		}
	}
	if u := o.owner(t, 2); u != claim.UID {
		t.Errorf("accel2 is reserved for %q, want the claim", u)
	}
	spec, err := cfg.CDIWriter.Read(string(claim.UID))
	if err != nil {
		t.Fatal(err)
	}
	wantEdits := specs.ContainerEdits{Env: []string{"ACCEL_VISIBLE_DEVICES=2"},
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel2", HostPath: filepath.Join(o.root, "dev", "accel2")}}}
	if len(spec.Devices) != 1 || spec.Devices[0].Name != string(claim.UID)+"-accel-2" {
		t.Fatalf("spec devices %+v", spec.Devices)
	}
	if diff := cmp.Diff(wantEdits, spec.Devices[0].ContainerEdits); diff != "" {
		t.Errorf("container edits of accel-2 (-want +got):\n%s", diff)
	}

	resp, err := srv.Unprepare(t.Context(), claim)
	if err != nil || resp.Claims[string(claim.UID)].Error != "" {
		t.Fatalf("unprepare: %v %+v", err, resp)
	}
	if u := o.owner(t, 2); u != "" {
		t.Errorf("accel2 still reserved for %q after unprepare", u)
	}
	if uids, _ := cfg.CDIWriter.List(); len(uids) > 0 {
		t.Errorf("specs left after unprepare: %v", uids)
	}
}

// allocated is a claim allocated one device of the driver in pool, for request "accel".
func allocated(name, pool, device string) *resourceapi.ResourceClaim {
	c := kubelettest.Claim(name, driverName, "")
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "accel", Driver: driverName, Pool: pool, Device: device}}}}
	return c
}

// TestBadClaimsLeaveNothing: a claim allocated another node's accelerator, one this node does
// not have, or one reserved for another claim fails with an error that says so, and reserves
// nothing and writes no spec.
func TestBadClaimsLeaveNothing(t *testing.T) {
	cases := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"another node's pool", allocated("c", "node-2", "accel-0"), `device accel-0: it is in pool "node-2", but this plugin serves pool "node-1"`},
		{"unknown device", allocated("c", testNode, "accel-7"), "device accel-7: the driver does not list it on node node-1"},
		{"reserved for another claim", allocated("c", testNode, "accel-1"), "accel-1 is reserved for claim other"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := fakeNode(t, 2)
			if err := os.WriteFile(filepath.Join(o.root, "sys", "class", "accel", "accel1", "owner"), []byte("other\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			p, cfg := o.newPlugin(t, testhooks.Hooks{})
			if _, err := kubelettest.Prepare(t.Context(), p, c.claim); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("prepare: error %v, want one containing %q", err, c.want)
			}
			uids, _ := cfg.CDIWriter.List()
			if o.owner(t, 0) != "" || o.owner(t, 1) != "other" || len(uids) > 0 {
				t.Errorf("left behind: accel0 reserved for %q, accel1 for %q, specs %v", o.owner(t, 0), o.owner(t, 1), uids)
			}
		})
	}
}

// TestRender: render prints one ResourceSlice of the node's accelerators, with their index and
// model; a missing node name is a usage error.
func TestRender(t *testing.T) {
	o := fakeNode(t, 3)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"render", "--node-name", testNode, "--root", o.root}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var slice resourceapi.ResourceSlice
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(out.Bytes(), []byte("---\n")), &slice); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range slice.Spec.Devices {
		got = append(got, fmt.Sprintf("%s index=%d model=%s", d.Name, *d.Attributes["index"].IntValue, *d.Attributes["model"].StringValue))
	}
	want := []string{"accel-0 index=0 model=A1", "accel-1 index=1 model=A1", "accel-2 index=2 model=A1"}
	if diff := cmp.Diff(want, got); diff != "" || slice.Spec.Driver != driverName || *slice.Spec.NodeName != testNode {
		t.Errorf("slice %s on %s, devices (-want +got):\n%s", slice.Spec.Driver, *slice.Spec.NodeName, diff)
	}
	if code := run(context.Background(), []string{"render", "--root", o.root, "--node-name", ""}, &out, &errOut); code != exitUsage {
		t.Errorf("render without a node name: exit %d, want %d", code, exitUsage)
	}
}
