package nodeplugin_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/draplugin/exclusive"
	"github.com/gpudra/gpudra/draplugin/kubelettest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/gputest"
)

// listDir names the entries of dir, none when it does not exist.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(filepath.Base(dir), e.Name()))
	}
	return out
}

// TestDevices: a node whose four GPUs are registered in one clique publishes channel-0 and
// daemon-0 with type, id and cliqueID; a GPU still registering, a failed one, or one in another
// clique keeps the node's devices unpublished.
func TestDevices(t *testing.T) {
	attrs := func(typ, clique string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"type": {StringValue: ptr.To(typ)}, "id": {IntValue: ptr.To(int64(0))}, "cliqueID": {StringValue: ptr.To(clique)}}
	}
	rack, _ := gputest.NVLDomain("rack", 0, 0)
	clique := rack[0].CliqueID()
	for _, tc := range []struct {
		name   string
		fabric func(gputest.DomainNode) gputest.DomainNode
		want   []resourceapi.Device
	}{
		{"in a clique", nil, []resourceapi.Device{
			{Name: "channel-0", Attributes: attrs("channel", clique)}, {Name: "daemon-0", Attributes: attrs("daemon", clique)}}},
		{"registering", func(n gputest.DomainNode) gputest.DomainNode { n.Fabric = n.Fabric.InProgress(); return n }, nil},
		{"failed", func(n gputest.DomainNode) gputest.DomainNode {
			n.Fabric = n.Fabric.Failed(nvml.ERROR_UNKNOWN)
			return n
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{fabric: tc.fabric})
			got, err := e.driver.Devices(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClique: a node is in a clique only when all its GPUs are, in the same one; the error
// says which GPU keeps it out.
func TestClique(t *testing.T) {
	rack, _ := gputest.NVLDomain("rack", 2, 2)
	for _, tc := range []struct {
		name    string
		opts    []gputest.Option
		want    string
		wantErr string
	}{
		{"one clique", rack[1].Options(), rack[1].CliqueID(), ""},
		{"a GPU in another clique", append(rack[0].Options(), gputest.WithGPUFabric(3, rack[1].Fabric)), "", "GPU 3 is in clique " + rack[1].CliqueID() + ", GPU 0 in " + rack[0].CliqueID()},
		{"a GPU registering", append(rack[0].Options(), gputest.WithGPUFabric(2, rack[0].Fabric.InProgress())), "", "GPU 2 (GPU-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := gputest.New("gb200-nvl4", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			gpus, err := fabricOf(m).GPUs(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			got, err := nodeplugin.Clique(gpus)
			if tc.wantErr != "" {
				if !errors.Is(err, nodeplugin.ErrNoClique) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Clique: %q, %v; want ErrNoClique containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("Clique: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := nodeplugin.Clique(nil); !errors.Is(err, nodeplugin.ErrNoClique) {
		t.Errorf("Clique of no GPUs: %v", err)
	}
}

// TestChannelThroughKubelet: through the plugin's real sockets, a channel claim of a Ready
// domain gets channel 0's device node and NVIDIA_VISIBLE_DEVICES=void in its CDI spec, without
// touching the node's labels (the controller's); unprepare removes every trace of the claim.
func TestChannelThroughKubelet(t *testing.T) {
	e := newEnv(t, envConfig{})
	if err := e.client.Create(t.Context(), domain("train", domainUID, e.clique, 1, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
		t.Fatal(err)
	}
	srv, err := e.node.Serve(t.Context(), e.plugin, exclusive.StartConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := e.allocate(claim("job", channelSel, channelParams(domainUID, "")))
	resp, err := srv.Prepare(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Claims[string(c.UID)]; r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != nodeplugin.ChannelDevice {
		t.Fatalf("prepare: %+v", r)
	}
	if got := e.label(); got != "" {
		t.Errorf("the plugin labelled the node %q; labels are the controller's", got)
	}
	want := specs.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"},
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia-caps-imex-channels/channel0", Type: "c", Major: 511, Minor: 0}}}
	if diff := cmp.Diff(want, specEdits(t, e, c)); diff != "" {
		t.Errorf("CDI edits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0}}, e.channels.calls()); diff != "" {
		t.Errorf("channels made (-want +got):\n%s", diff)
	}
	if _, err := srv.Unprepare(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if got := e.leftovers(); len(got) > 0 {
		t.Errorf("left after unprepare: %v", got)
	}
}

// specEdits returns the container edits of the claim's one device in its CDI spec.
func specEdits(t *testing.T, e *env, c *resourceapi.ResourceClaim) specs.ContainerEdits {
	t.Helper()
	w, err := cdi.NewWriter(cdi.WithSpecDir(e.node.CDIDir), cdi.WithWriterKind(computedomain.DriverName, "claim"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := w.Read(string(c.UID))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 1 {
		t.Fatalf("spec has devices %+v, want one", spec.Devices)
	}
	return spec.Devices[0].ContainerEdits
}

// TestChannelAllMode: AllocationMode All gives the container every channel (ChannelCount).
func TestChannelAllMode(t *testing.T) {
	e := newEnv(t, envConfig{objects: nil})
	if err := e.client.Create(t.Context(), domain("train", domainUID, e.clique, 0, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
		t.Fatal(err)
	}
	c := e.allocate(claim("job", channelSel, channelParams(domainUID, "All")))
	if _, err := kubelettest.Prepare(t.Context(), e.plugin, c); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, d := range specEdits(t, e, c).DeviceNodes {
		paths = append(paths, d.Path)
	}
	if diff := cmp.Diff([]string{computedomain.ChannelDevicePath(0), computedomain.ChannelDevicePath(1), computedomain.ChannelDevicePath(2), computedomain.ChannelDevicePath(3)}, paths); diff != "" {
		t.Errorf("device nodes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([][]int{{0, 1, 2, 3}}, e.channels.calls()); diff != "" {
		t.Errorf("channels made (-want +got):\n%s", diff)
	}
}

// TestChannelWaitsForDaemon: a channel prepared before the node's IMEX daemon is Ready waits,
// and succeeds once the status says so (for numNodes > 0, the domain too).
func TestChannelWaitsForDaemon(t *testing.T) {
	e := newEnv(t, envConfig{ready: 20 * time.Second})
	if err := e.client.Create(t.Context(), domain("train", domainUID, e.clique, 2, v1beta1.StatusNotReady, nil)); err != nil {
		t.Fatal(err)
	}
	c := e.allocate(claim("job", channelSel, channelParams(domainUID, "")))
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := kubelettest.Prepare(t.Context(), e.plugin, c)
		done <- err
	}()
	steps := []struct{ node, domain string }{{v1beta1.StatusNotReady, v1beta1.StatusNotReady}, {v1beta1.StatusReady, v1beta1.StatusNotReady}, {v1beta1.StatusReady, v1beta1.StatusReady}}
	for _, s := range steps {
		select {
		case err := <-done:
			t.Fatalf("prepare ended (%v) before node %s, domain %s", err, s.node, s.domain)
		case <-time.After(200 * time.Millisecond):
		}
		e.setNodeStatus("train", s.node, s.domain)
	}
	if err := <-done; err != nil {
		t.Fatalf("prepare after the domain became Ready: %v", err)
	}
	if waited := time.Since(start); waited < 600*time.Millisecond {
		t.Errorf("prepare returned after %s, before the domain was Ready", waited)
	}
}

// TestChannelNotReady: a channel whose node's daemon does not become Ready in time fails with
// the domain, the node and what is missing, and leaves no record, spec or checkpoint entry
// behind.
func TestChannelNotReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		dom  func(clique, node string) *v1beta1.ComputeDomain
		want string
	}{
		{"no daemon yet", func(clique, _ string) *v1beta1.ComputeDomain {
			return domain("train", domainUID, clique, 0, v1beta1.StatusNotReady, map[string]string{"rack-05": v1beta1.StatusReady})
		}, "status.nodes has no entry of node rack-00 (its IMEX daemon has not reported yet)"},
		{"daemon not ready", func(clique, node string) *v1beta1.ComputeDomain {
			return domain("train", domainUID, clique, 0, v1beta1.StatusNotReady, map[string]string{node: v1beta1.StatusNotReady})
		}, `the IMEX daemon of node rack-00 is "NotReady" in status.nodes, not Ready`},
		{"domain not ready", func(clique, node string) *v1beta1.ComputeDomain {
			return domain("train", domainUID, clique, 2, v1beta1.StatusNotReady, map[string]string{node: v1beta1.StatusReady})
		}, `the domain is "NotReady" in status.status, not Ready (it needs 2 nodes with a ready IMEX daemon)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{ready: 100 * time.Millisecond})
			if err := e.client.Create(t.Context(), tc.dom(e.clique, e.nodeName)); err != nil {
				t.Fatal(err)
			}
			c := e.allocate(claim("job", channelSel, channelParams(domainUID, "")))
			_, err := kubelettest.Prepare(t.Context(), e.plugin, c)
			want := "ComputeDomain default/train (" + string(domainUID) + ") is not ready for a channel on node rack-00 after 100ms: " + tc.want
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("prepare: %v\nwant an error containing %q", err, want)
			}
			if got := e.leftovers(); len(got) > 0 {
				t.Errorf("left after the failed prepare: %v", got)
			}
			if got := e.channels.calls(); len(got) > 0 {
				t.Errorf("channels made for a domain that is not ready: %v", got)
			}
		})
	}
}

// TestChannelNotReadyReason: when the wait's deadline cuts off a lookup of the domain, the
// error still says why the domain was not ready, not that the lookup was cut off.
func TestChannelNotReadyReason(t *testing.T) {
	lookups := 0
	funcs := &interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		if _, ok := list.(*v1beta1.ComputeDomainList); ok {
			if lookups++; lookups > 1 { // the lookups of the wait hang until its deadline
				<-ctx.Done()
				return ctx.Err()
			}
		}
		return c.List(ctx, list, opts...)
	}}
	e := newEnv(t, envConfig{ready: 100 * time.Millisecond, funcs: funcs})
	dom := domain("train", domainUID, e.clique, 0, v1beta1.StatusNotReady, map[string]string{e.nodeName: v1beta1.StatusNotReady})
	if err := e.client.Create(t.Context(), dom); err != nil {
		t.Fatal(err)
	}
	c := e.allocate(claim("job", channelSel, channelParams(domainUID, "")))
	_, err := kubelettest.Prepare(t.Context(), e.plugin, c)
	want := `after 100ms: the IMEX daemon of node rack-00 is "NotReady" in status.nodes, not Ready; kubelet retries`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("prepare: %v\nwant an error containing %q", err, want)
	}
}

// TestChannelRefused: a channel of a domain in another clique, of a domain without a clique, or
// of an unknown domain is refused before anything is changed.
func TestChannelRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		clique string // the domain's; "node" for the node's
		uid    string
		want   string
	}{
		{name: "other clique", clique: "0000-other.1", want: "ComputeDomain default/train (" + string(domainUID) + ") is in NVLink clique 0000-other.1, node rack-00 in "},
		{name: "no clique yet", clique: "", want: "has no clique yet (status.cliqueID is empty)"},
		{name: "unknown domain", clique: "node", uid: string(otherUID), want: "no ComputeDomain with UID " + string(otherUID) + " in namespace default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{ready: 5 * time.Second})
			clique := tc.clique
			if clique == "node" {
				clique = e.clique
			}
			if err := e.client.Create(t.Context(), domain("train", domainUID, clique, 0, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
				t.Fatal(err)
			}
			uid := domainUID
			if tc.uid != "" {
				uid = types.UID(tc.uid)
			}
			c := e.allocate(claim("job", channelSel, channelParams(uid, "")))
			_, err := kubelettest.Prepare(t.Context(), e.plugin, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("prepare: %v\nwant an error containing %q", err, tc.want)
			}
			if got := e.leftovers(); len(got) > 0 {
				t.Errorf("left after the refused prepare: %v", got)
			}
		})
	}
}

// TestDaemon: the daemon device gets its domain's directory under the state directory (0700),
// mounted at /imexd with the domain and the node's clique; unprepare removes the directory.
func TestDaemon(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := e.allocate(claim("imex", daemonSel, daemonParams(domainUID)))
	if _, err := kubelettest.Prepare(t.Context(), e.plugin, c); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.node.StateDir, "domains", string(domainUID))
	want := specs.ContainerEdits{
		Env:    []string{"COMPUTE_DOMAIN_UUID=" + string(domainUID), "COMPUTE_DOMAIN_CLIQUE=" + e.clique, "NVIDIA_VISIBLE_DEVICES=void"},
		Mounts: []*specs.Mount{{HostPath: dir, ContainerPath: "/imexd", Options: []string{"rw", "nosuid", "nodev", "bind"}}},
	}
	if diff := cmp.Diff(want, specEdits(t, e, c)); diff != "" {
		t.Errorf("CDI edits (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("daemon directory %s: %v, %v; want a directory with mode 0700", dir, fi, err)
	}
	if got := e.label(); got != "" {
		t.Errorf("the daemon device labelled the node %q", got)
	}
	if err := kubelettest.Unprepare(t.Context(), e.plugin, c); err != nil {
		t.Fatal(err)
	}
	if got := e.leftovers(); len(got) > 0 {
		t.Errorf("left after unprepare: %v", got)
	}
}

// TestDaemonFailedPrepare: when the plugin fails after the driver prepared the daemon device
// (recording PrepareCompleted fails, as on a full disk), the directory is removed with the rest.
func TestDaemonFailedPrepare(t *testing.T) {
	writes := 0
	full := testhooks.Hooks{CheckpointWrite: func(string) error {
		if writes++; writes == 2 { // PrepareStarted, then PrepareCompleted
			return errors.New("no space left on device")
		}
		return nil
	}}
	e := newEnv(t, envConfig{hooks: full})
	c := e.allocate(claim("imex", daemonSel, daemonParams(domainUID)))
	if _, err := kubelettest.Prepare(t.Context(), e.plugin, c); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("prepare: %v, want the failed checkpoint write", err)
	}
	if got := e.leftovers(); len(got) > 0 {
		t.Errorf("left after the failed prepare: %v", got)
	}
}

// TestUnprepareKeepsWhatAnotherClaimHolds: a claim's unprepare leaves the domain's daemon
// directory while another claim of the same domain holds it (a replaced daemon pod whose new
// claim was prepared first).
func TestUnprepareKeepsWhatAnotherClaimHolds(t *testing.T) {
	e := newEnv(t, envConfig{})
	old := e.allocate(claim("imex-old", daemonSel, daemonParams(domainUID)))
	if _, err := kubelettest.Prepare(t.Context(), e.plugin, old); err != nil {
		t.Fatal(err)
	}
	// The new pod's claim gets the device once the old one's is deallocated, before kubelet
	// unprepares the old claim.
	e.node.Release(old)
	replacement := e.allocate(claim("imex-new", daemonSel, daemonParams(domainUID)))
	if err := e.driverPrepare(replacement); err != nil {
		t.Fatal(err)
	}
	if err := kubelettest.Unprepare(t.Context(), e.plugin, old); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.node.StateDir, "domains", string(domainUID))
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the old claim's unprepare removed the directory the new claim holds: %v", err)
	}
	if err := e.driver.Unprepare(t.Context(), replacement.UID, nodeplugin.DaemonDevice); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory after the last claim's unprepare: %v", err)
	}
}

// driverPrepare calls the driver directly, as a second plugin process of a rolling update
// would have prepared the claim.
func (e *env) driverPrepare(c *resourceapi.ResourceClaim) error {
	_, err := e.driver.Prepare(e.t.Context(), c, nodeplugin.DaemonDevice)
	return err
}

// TestNewConfig: New refuses a config without what it needs.
func TestNewConfig(t *testing.T) {
	ok := nodeplugin.Config{NodeName: "n", StateDir: t.TempDir(), Fabric: fabricOf(nil),
		Domains: nodeplugin.NewClientDomains(nil), Channels: &fakeChannels{}}
	for _, tc := range []struct {
		name   string
		change func(*nodeplugin.Config)
		want   string
	}{
		{"no state dir", func(c *nodeplugin.Config) { c.StateDir = "" }, "StateDir is required"},
		{"no fabric", func(c *nodeplugin.Config) { c.Fabric = nil }, "Fabric, Domains and Channels are required"},
		{"bad node name", func(c *nodeplugin.Config) { c.NodeName = "Node_1" }, "Node_1"},
		{"negative timeout", func(c *nodeplugin.Config) { c.ReadyTimeout = -time.Second }, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			if _, err := nodeplugin.New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := nodeplugin.New(ok); err != nil {
		t.Errorf("New: %v", err)
	}
}

// TestCrashAfterChannelPrepared: a plugin killed after the driver made a channel's device node
// (and before the claim was complete) leaves the claim PrepareStarted; the restarted plugin's
// reconciliation rolls it back, leaving nothing, and the retried prepare works.
func TestCrashAfterChannelPrepared(t *testing.T) {
	c := claim("job", channelSel, channelParams(domainUID, ""))
	crash := testhooks.CrashAt(c.UID, 2) // PrepareStarted, then DevicePrepared
	e := newEnv(t, envConfig{hooks: crash.Hooks()})
	if err := e.client.Create(t.Context(), domain("train", domainUID, e.clique, 0, v1beta1.StatusReady, map[string]string{e.nodeName: v1beta1.StatusReady})); err != nil {
		t.Fatal(err)
	}
	c = e.allocate(c)
	if _, err := kubelettest.Prepare(t.Context(), e.plugin, c); !errors.Is(err, testhooks.ErrCrash) {
		t.Fatalf("prepare: %v, want the simulated crash", err)
	}
	if got := e.channels.calls(); len(got) != 1 {
		t.Fatalf("channels made before the crash: %v, want one call (the driver had prepared the channel)", got)
	}
	_ = e.plugin.Close()
	restarted, err := e.node.NewPlugin(t.Context(), exclusive.Config{DriverName: computedomain.DriverName, Driver: e.driver})
	if err != nil {
		t.Fatal(err)
	}
	e.plugin = restarted
	t.Cleanup(func() { _ = restarted.Close() })
	rep, err := restarted.Reconcile(t.Context())
	if err != nil || len(rep.RolledBack) != 1 {
		t.Fatalf("reconcile: %v, %v; want the claim rolled back", rep, err)
	}
	if got := e.leftovers(); len(got) > 0 {
		t.Errorf("left after the rollback: %v", got)
	}
	if _, err := kubelettest.Prepare(t.Context(), restarted, c); err != nil {
		t.Fatalf("retried prepare: %v", err)
	}
}

// TestWatchFabric: a tray whose fabric registration completes after the plugin started gets its
// devices republished at the next read, a tray that leaves its clique too, and a failed
// republication is tried again; while the clique stays as listed, nothing is republished.
func TestWatchFabric(t *testing.T) {
	e := newEnv(t, envConfig{fabric: func(n gputest.DomainNode) gputest.DomainNode { n.Fabric = n.Fabric.InProgress(); return n }})
	if devs, err := e.driver.Devices(t.Context()); err != nil || len(devs) != 0 {
		t.Fatalf("registering tray: devices %v, %v; want none", devs, err)
	}
	published := make(chan []resourceapi.Device, 10)
	failNext := make(chan struct{}, 1)
	publish := func(ctx context.Context) error {
		devs, err := e.driver.Devices(ctx)
		select {
		case <-failNext: // listed, but the slices were not written
			return errors.New("injected: the API server is away")
		default:
		}
		published <- devs
		return err
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go e.driver.WatchFabric(ctx, 10*time.Millisecond, publish)
	setFabric := func(f gputest.Fabric) {
		t.Helper()
		for i := range 4 {
			if err := e.machine.SetFabric(i, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	next := func(what string) []resourceapi.Device {
		t.Helper()
		select {
		case devs := <-published:
			return devs
		case <-time.After(10 * time.Second):
			t.Fatalf("no republication after %s", what)
			return nil
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case devs := <-published:
			t.Fatalf("republished %v while %s", devs, what)
		case <-time.After(100 * time.Millisecond):
		}
	}
	quiet("the tray still registers")

	setFabric(e.fabric)
	if devs := next("the registration completed"); len(devs) != 2 || *devs[0].Attributes[computedomain.AttrCliqueID].StringValue != e.clique {
		t.Fatalf("after the registration completed: %v, want channel and daemon devices of clique %s", devs, e.clique)
	}
	quiet("the clique stays")

	failNext <- struct{}{}
	setFabric(e.fabric.Failed(nvml.ERROR_UNKNOWN))
	if devs := next("the registration failed (a republication failing once)"); len(devs) != 0 {
		t.Fatalf("after the registration failed: %v, want none", devs)
	}
	quiet("the tray stays out of any clique")
}
