package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// cdRBACParts are the parts of the ComputeDomain driver whose ClusterRole
// (<release>-compute-domain-<part>) TestChartComputeDomainRBACEveryRuleIsNeeded proves with one
// node's work; the controller's roles are proved by runControllerVariants.
var cdRBACParts = []string{"plugin", "daemon"}

// cdRBACRoles are the chart's roles of the ComputeDomain driver, by name suffix: a ClusterRole
// per part and the controller's leader Role.
var cdRBACRoles = []string{"plugin", "daemon", "controller", "controller-leader"}

// TestChartComputeDomainRBACEveryRuleIsNeeded (issue 31) runs the API work of one node of a
// ComputeDomain (the plugin publishes its pool, removes a stale slice and repairs an edited one,
// prepares a daemon claim; the daemon reports its node Ready; the plugin prepares a channel
// claim; the daemon withdraws its node when it stops) with the plugin and the daemon each as
// its own ServiceAccount bound to the chart's ClusterRole of that part (computeDomains.enabled),
// once as rendered and once for every verb of every rule of either role with that verb
// removed. The full roles must pass; every reduced role must fail, so the chart grants neither
// part anything it does not use. Each variant has its own node, domain and ServiceAccounts.
// The domain's clique, which the controller would choose, is written by the test. Then the
// controller's variants (its ClusterRole and leader Role) run one after the other through a
// domain's lifecycle (runControllerVariants).
func TestChartComputeDomainRBACEveryRuleIsNeeded(t *testing.T) {
	roles := chartComputeDomainRoles(t)
	env := newCDRBACEnv(t)
	// The variants mostly wait (the slice controller's repair delay, the daemon's start): they
	// run all at once, not -parallel (GOMAXPROCS) at a time.
	var wg sync.WaitGroup
	for i, v := range cdRBACVariants(roles) {
		wg.Go(func() {
			t.Run(v.name, func(t *testing.T) { v.run(t, env, fmt.Sprint(i)) })
		})
	}
	wg.Wait()
	runControllerVariants(t, env, roles["controller"], roles["controller-leader"])
}

// cdRBACVariant is the chart's roles, or them with one verb of one part's role removed.
type cdRBACVariant struct {
	name    string
	rules   map[string][]rbacv1.PolicyRule // by part
	reduced string                         // the part whose role lacks a verb; "" for the full roles
}

// cdRBACVariants are the full roles and, for every verb of every rule of every part, the roles
// without it.
func cdRBACVariants(roles map[string][]rbacv1.PolicyRule) []cdRBACVariant {
	variants := []cdRBACVariant{{name: "plugin-daemon-full", rules: roles}}
	for _, part := range cdRBACParts {
		for i, r := range roles[part] {
			for _, v := range r.Verbs {
				rules := maps.Clone(roles)
				rules[part] = withoutVerb(roles[part], i, v)
				name := fmt.Sprintf("%s-no-%s-%s", part, v, strings.ReplaceAll(strings.Join(r.Resources, "-"), "/", "-"))
				variants = append(variants, cdRBACVariant{name: name, rules: rules, reduced: part})
			}
		}
	}
	return variants
}

// run does the node's API work with the variant's roles: the full roles must pass, a reduced
// one must fail.
func (v cdRBACVariant) run(t *testing.T, env *cdRBACEnv, id string) {
	w := &cdRBACWork{t: t, env: env, id: id}
	for _, part := range cdRBACParts {
		if err := w.account(part, v.rules[part]); err != nil {
			t.Fatal(err)
		}
	}
	if strings.HasSuffix(v.name, "-no-list-resourceslices") {
		// As in TestChartRBACEveryRuleIsNeeded: client-go fills informers with a streaming
		// watch and lists only where the API server cannot stream.
		w.pluginEnv = []string{"KUBE_FEATURE_WatchListClient=false"}
	}
	err := w.run(context.Background())
	switch {
	case v.reduced == "" && err != nil:
		t.Errorf("with the chart's ClusterRoles: %v", err)
	case v.reduced != "" && err == nil:
		t.Errorf("the %s did all its API work without this permission: the chart should not grant it", v.reduced)
	case err != nil:
		t.Logf("fails as it should: %v", err)
	}
}

// chartComputeDomainRoles renders the chart with computeDomains.enabled and returns the rules of
// its ClusterRoles <release>-compute-domain-<part>, by part.
func chartComputeDomainRoles(t *testing.T) map[string][]rbacv1.PolicyRule {
	t.Helper()
	objs, err := framework.RenderChart(filepath.Join(suite.Repo, chartPath), suite.Bins.KubernetesVersion,
		framework.Release{Name: releaseName, Namespace: releaseNamespace, Values: chartValueSets["compute-domains"]})
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		for _, part := range cdRBACRoles {
			if strings.HasSuffix(o.GetName(), "-compute-domain-"+part) {
				cr := &rbacv1.ClusterRole{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cr); err != nil {
					t.Fatal(err)
				}
				roles[part] = cr.Rules
			}
		}
	}
	for _, part := range cdRBACRoles {
		if len(roles[part]) == 0 {
			t.Fatalf("the chart renders no rules for the ComputeDomain %s", part)
		}
	}
	return roles
}

// cdRBACEnv is what the variants share: the driver binary, a fake driver root with nvidia-imex,
// and an admin client that knows ComputeDomains.
type cdRBACEnv struct {
	dir, bin, driverRoot string
	client               client.Client
}

func newCDRBACEnv(t *testing.T) *cdRBACEnv {
	t.Helper()
	ctx := context.Background()
	e := &cdRBACEnv{dir: filepath.Join(suite.Dir, "cdrbac")}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := applyComputeDomainAPI(ctx); err != nil {
		t.Fatal(err)
	}
	r := &cdRack{dir: e.dir}
	if err := r.build(ctx); err != nil {
		t.Fatal(err)
	}
	e.bin = r.bin
	e.driverRoot = imextest.NewDriverRoot(rackTB{TB: t, dir: e.dir})
	ctrllog.SetLogger(logr.Discard())
	scheme := runtime.NewScheme()
	if err := cdv1beta1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.client, err = client.New(suite.CP.Admin, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	// The CRD takes a moment to be served after it is Established.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return e.client.List(ctx, &cdv1beta1.ComputeDomainList{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("ComputeDomains never served: %v", err)
	}
	return e
}

// cdRBACWork is one variant's node of a ComputeDomain, step by step.
type cdRBACWork struct {
	t         *testing.T
	env       *cdRBACEnv
	id        string
	pluginEnv []string
	// kubeconfigs by part.
	kubeconfigs map[string]string

	node   *cdNode
	ns     string
	domain *cdv1beta1.ComputeDomain
	daemon *framework.Process
	claims map[string]fakekubelet.Claim // by device
}

// account creates part's ServiceAccount bound to rules and writes its kubeconfig.
func (w *cdRBACWork) account(part string, rules []rbacv1.PolicyRule) error {
	ctx := context.Background()
	sa := shortName("cdrbac", w.id, part)
	if err := grant(ctx, sa, rules); err != nil {
		return err
	}
	token, err := framework.ServiceAccountToken(ctx, suite.Client, releaseNamespace, sa, nil)
	if err != nil {
		return err
	}
	path := filepath.Join(w.env.dir, sa+".kubeconfig")
	if w.kubeconfigs == nil {
		w.kubeconfigs = map[string]string{}
	}
	w.kubeconfigs[part] = path
	return framework.WriteKubeconfig(path, suite.CP.URL, suite.CP.CAFile, framework.Credentials{Token: token})
}

// run does the node's API work and returns the first step that failed, or nil.
func (w *cdRBACWork) run(ctx context.Context) error {
	w.ns = shortName("cdrbac", w.id)
	if err := framework.CreateNamespace(ctx, suite.Client, w.ns, nil); err != nil {
		w.t.Fatal(err)
	}
	domain, err := gputest.NVLDomain(w.ns, 1, 1)
	if err != nil {
		w.t.Fatal(err)
	}
	w.node = &cdNode{name: shortName("cdrbac", w.id, "node"), clique: domain[0].CliqueID(), podIP: "10.201.0.1"}
	w.claims = map[string]fakekubelet.Claim{}
	if err := w.createStaleSlice(ctx); err != nil {
		w.t.Fatal(err)
	}
	steps := []func(context.Context) error{w.startPlugin, w.publish, w.repairEditedSlice, w.createDomain,
		w.prepareDaemon, w.startDaemon, w.prepareChannel, w.withdraw, w.noForbiddenCalls}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// createStaleSlice leaves a slice of an older generation in the node's pool.
func (w *cdRBACWork) createStaleSlice(ctx context.Context) error {
	_, err := suite.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: w.node.name + "-stale"},
		Spec: resourceapi.ResourceSliceSpec{Driver: computedomain.DriverName, NodeName: ptr.To(w.node.name),
			Pool:    resourceapi.ResourcePool{Name: w.node.name, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "stale-device"}}},
	}, metav1.CreateOptions{})
	return err
}

// startPlugin creates the Node and starts and registers its plugin as the plugin's account
// (get nodes: it reads its Node to own its slices).
func (w *cdRBACWork) startPlugin(ctx context.Context) error {
	r := &cdRack{dir: w.env.dir, bin: w.env.bin, kubeconfig: w.kubeconfigs["plugin"], pluginEnv: w.pluginEnv}
	// The plugin stopped, its slices would stay: the controller variants and later tests
	// must not find a clique there.
	w.t.Cleanup(func() { removeNodeAndSlices(w.t, w.node.name) })
	err := r.startNode(ctx, w.node)
	if w.node.proc != nil {
		w.t.Cleanup(func() {
			if w.node.plugin != nil {
				_ = w.node.plugin.Close()
			}
			_ = w.node.proc.Stop(5 * time.Second)
		})
	}
	if err != nil {
		return fmt.Errorf("the plugin did not start: %w", err)
	}
	return nil
}

// poolDevices returns the device names of the node's slices of this driver and whether the
// stale slice is among them.
func (w *cdRBACWork) poolDevices(ctx context.Context) ([]string, []resourceapi.ResourceSlice, error) {
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: w.node.name, resourceapi.ResourceSliceSelectorDriver: computedomain.DriverName}.AsSelector().String()
	list, err := suite.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, s := range list.Items {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name)
		}
	}
	slices.Sort(names)
	return names, list.Items, nil
}

// wantDevices are the devices the plugin publishes for a node with one channel.
var wantDevices = []string{nodeplugin.ChannelDevice, nodeplugin.DaemonDevice}

// publish: the pool appears (list/watch, create) and the stale slice goes (delete).
func (w *cdRBACWork) publish(ctx context.Context) error {
	return pollFor(ctx, 20*time.Second, "publish the pool and delete the stale slice", func(ctx context.Context) (bool, error) {
		names, _, err := w.poolDevices(ctx)
		return err == nil && slices.Equal(names, wantDevices), err
	})
}

// repairEditedSlice: a slice edited by someone else is put back (watch, update). The slice
// controller repairs its pool resourceslice.DefaultSyncDelay (30s) after a foreign change.
func (w *cdRBACWork) repairEditedSlice(ctx context.Context) error {
	_, pool, err := w.poolDevices(ctx)
	if err != nil {
		return err
	}
	if len(pool) != 1 {
		return fmt.Errorf("the pool has %d slices, want 1", len(pool))
	}
	edited := pool[0].DeepCopy()
	edited.Spec.Devices = []resourceapi.Device{{Name: "edited"}}
	if _, err := suite.Client.ResourceV1().ResourceSlices().Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("edit the plugin's slice: %w", err)
	}
	return pollFor(ctx, 45*time.Second, "put back a slice edited behind the plugin's back", func(ctx context.Context) (bool, error) {
		names, _, err := w.poolDevices(ctx)
		return err == nil && slices.Equal(names, wantDevices), err
	})
}

// createDomain creates the node's ComputeDomain (numNodes 0: a channel needs only its node's
// daemon Ready) and gives it the node's clique, as the controller would.
func (w *cdRBACWork) createDomain(ctx context.Context) error {
	w.domain = &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "domain"},
		Spec: cdv1beta1.ComputeDomainSpec{Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: "domain-channel"}}}}
	if err := w.env.client.Create(ctx, w.domain); err != nil {
		w.t.Fatalf("create ComputeDomain: %v", err)
	}
	// The controller variants, which run next, would reconcile it.
	w.t.Cleanup(func() { _ = w.env.client.Delete(context.Background(), w.domain) })
	w.domain.Status.CliqueID = w.node.clique
	if err := w.env.client.Status().Update(ctx, w.domain); err != nil {
		w.t.Fatalf("set the domain's clique: %v", err)
	}
	return nil
}

// allocatedClaim creates a claim in the domain's namespace for device of the node with the
// opaque config of kind and writes its allocation, as the scheduler would.
func (w *cdRBACWork) allocatedClaim(ctx context.Context, device, class, kind string) fakekubelet.Claim {
	params, err := json.Marshal(map[string]string{"apiVersion": cdv1beta1.GroupVersion().String(), "kind": kind, "domainID": string(w.domain.UID)})
	if err != nil {
		w.t.Fatal(err)
	}
	cfg := resourceapi.OpaqueDeviceConfiguration{Driver: computedomain.DriverName, Parameters: runtime.RawExtension{Raw: params}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: device},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
			Config:   []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &cfg}}},
		}}}
	claim, err = suite.Client.ResourceV1().ResourceClaims(w.ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "r", Driver: computedomain.DriverName, Pool: w.node.name, Device: device}},
		Config:  []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &cfg}}},
	}}
	if _, err := suite.Client.ResourceV1().ResourceClaims(w.ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	c := fakekubelet.Claim{Namespace: w.ns, Name: claim.Name, UID: string(claim.UID)}
	w.claims[device] = c
	return c
}

// prepareDaemon: the plugin prepares the daemon claim (get resourceclaims).
func (w *cdRBACWork) prepareDaemon(ctx context.Context) error {
	c := w.allocatedClaim(ctx, nodeplugin.DaemonDevice, "compute-domain-daemon.nvidia.com", cdv1beta1.DaemonConfigKind)
	resp, err := w.node.plugin.Prepare(ctx, c)
	if err := fakekubelet.PrepareErrors(resp, err, c); err != nil {
		return fmt.Errorf("prepare the daemon claim: %w", err)
	}
	return nil
}

// startDaemon starts the node's daemon as the daemon's account with the daemon claim's CDI
// edits, and waits until it reported the node Ready (get computedomains, patch status).
func (w *cdRBACWork) startDaemon(ctx context.Context) error {
	cdiEnv, dir, err := daemonClaimEdits(w.node, string(w.claims[nodeplugin.DaemonDevice].UID))
	if err != nil {
		return err
	}
	env := append([]string{computedomain.EnvNodeName + "=" + w.node.name, computedomain.EnvPodIP + "=" + w.node.podIP,
		computedomain.EnvDomainUID + "=" + string(w.domain.UID), computedomain.EnvDomainName + "=" + w.domain.Name,
		computedomain.EnvDomainNamespace + "=" + w.domain.Namespace}, cdiEnv...)
	w.daemon, err = framework.StartProcess("daemon "+w.node.name, filepath.Join(w.env.dir, w.node.name, "daemon.log"), env, w.env.bin, "daemon",
		"--kubeconfig="+w.kubeconfigs["daemon"], "--dir="+dir, "--driver-root="+w.env.driverRoot)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = w.daemon.Stop(5 * time.Second) })
	return pollFor(ctx, 30*time.Second, "the daemon reports its node Ready", func(ctx context.Context) (bool, error) {
		return w.nodeEntry(ctx) == cdv1beta1.StatusReady, nil
	})
}

// nodeEntry is the node's status in the domain ("" when not listed or unreadable).
func (w *cdRBACWork) nodeEntry(ctx context.Context) string {
	cd := &cdv1beta1.ComputeDomain{}
	if err := w.env.client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: w.domain.Name}, cd); err != nil {
		return ""
	}
	return nodeStatus(cd, w.node.name)
}

// prepareChannel: the plugin prepares a channel claim of the domain (list computedomains) and
// unprepares it.
func (w *cdRBACWork) prepareChannel(ctx context.Context) error {
	c := w.allocatedClaim(ctx, nodeplugin.ChannelDevice, "compute-domain-default-channel.nvidia.com", cdv1beta1.ChannelConfigKind)
	var last error
	err := pollFor(ctx, 30*time.Second, "prepare the channel claim", func(ctx context.Context) (bool, error) {
		resp, err := w.node.plugin.Prepare(ctx, c)
		last = fakekubelet.PrepareErrors(resp, err, c)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	resp, err := w.node.plugin.Unprepare(ctx, c)
	return fakekubelet.UnprepareErrors(resp, err, c)
}

// withdraw: the daemon stopped withdraws its node's entry (get computedomains, update status).
func (w *cdRBACWork) withdraw(ctx context.Context) error {
	if err := w.daemon.Stop(20 * time.Second); err != nil {
		return fmt.Errorf("the daemon did not stop cleanly: %w", err)
	}
	if st := w.nodeEntry(ctx); st != "" {
		return fmt.Errorf("the stopped daemon left its node %q in the domain's status", st)
	}
	c := w.claims[nodeplugin.DaemonDevice]
	resp, err := w.node.plugin.Unprepare(ctx, c)
	return fakekubelet.UnprepareErrors(resp, err, c)
}

// noForbiddenCalls: what degrades rather than fails still shows in the logs.
func (w *cdRBACWork) noForbiddenCalls(context.Context) error {
	var errs []error
	for _, p := range []*framework.Process{w.node.proc, w.daemon} {
		log := p.Tail(1 << 20)
		if i := strings.Index(log, "forbidden"); i >= 0 {
			errs = append(errs, fmt.Errorf("%s's log reports a forbidden API call: %s", p.Name, log[max(0, i-300):min(len(log), i+100)]))
		}
	}
	return errors.Join(errs...)
}
