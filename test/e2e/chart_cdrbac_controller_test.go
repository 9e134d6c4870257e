package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/controller"
	"github.com/gpudra/gpudra/computedomain/nodeplugin"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/fakekubelet"
)

// cdCtlLeaderElectionID is the controller's Lease (examples/compute-domain-driver).
const cdCtlLeaderElectionID = "compute-domain-controller.nvidia.com"

// cdCtlNodes are the nodes of the controller variants' clique; their slices are the test's.
var cdCtlNodes = []string{"cdctl-a", "cdctl-b"}

// cdCtlUnprovable are the controller's rules this tier cannot prove, with the reason: the
// variant without them is not run.
var cdCtlUnprovable = map[string]string{
	"update computedomains/finalizers": "needed only where the OwnerReferencesPermissionEnforcement admission plugin runs; the e2e API server does not enable it",
}

// cdCtlVariant is the controller's ClusterRole and leader Role, or them with one verb removed.
type cdCtlVariant struct {
	name           string
	cluster, named []rbacv1.PolicyRule
	reduced        bool
}

// cdCtlVariants are the full roles and, for every verb of every rule of each, the roles
// without it.
func cdCtlVariants(t *testing.T, cluster, leader []rbacv1.PolicyRule) []cdCtlVariant {
	variants := []cdCtlVariant{{name: "controller-full", cluster: cluster, named: leader}}
	add := func(rules []rbacv1.PolicyRule, set func(v *cdCtlVariant, rules []rbacv1.PolicyRule)) {
		for i, r := range rules {
			for _, verb := range r.Verbs {
				key := verb + " " + strings.Join(r.Resources, ",")
				if why, ok := cdCtlUnprovable[key]; ok {
					t.Logf("not proven here: %s (%s)", key, why)
					continue
				}
				v := cdCtlVariant{name: fmt.Sprintf("controller-no-%s-%s", verb, strings.ReplaceAll(strings.Join(r.Resources, "-"), "/", "-")),
					cluster: cluster, named: leader, reduced: true}
				set(&v, withoutVerb(rules, i, verb))
				variants = append(variants, v)
			}
		}
	}
	add(cluster, func(v *cdCtlVariant, r []rbacv1.PolicyRule) { v.cluster = r })
	add(leader, func(v *cdCtlVariant, r []rbacv1.PolicyRule) { v.named = r })
	return variants
}

// runControllerVariants runs the controller's variants one after the other: the controller
// reconciles every ComputeDomain of the cluster, so two at once would do each other's work.
func runControllerVariants(t *testing.T, env *cdRBACEnv, cluster, leader []rbacv1.PolicyRule) {
	if suite.cdRack != nil {
		// Its controller, an admin, would do the reduced variants' work on every domain, and
		// a needed verb would look unneeded.
		t.Fatal("the ComputeDomain rack's controller runs: the controller's RBAC variants must run before the rack's tests (go test runs files in name order; do not -shuffle this package)")
	}
	clique := cdCtlClique(t, env)
	for i, v := range cdCtlVariants(t, cluster, leader) {
		t.Run(v.name, func(t *testing.T) {
			w := &cdCtlWork{t: t, env: env, id: fmt.Sprint(i), clique: clique}
			err := w.run(context.Background(), v)
			switch {
			case !v.reduced && err != nil:
				t.Errorf("with the chart's roles: %v", err)
			case v.reduced && err == nil:
				t.Errorf("the controller did all its API work without this permission: the chart should not grant it")
			case err != nil:
				t.Logf("fails as it should: %v", err)
			}
		})
	}
}

// cdCtlClique creates the controller variants' two Nodes and publishes a channel of one clique
// on each, as their plugins would, and returns the clique.
func cdCtlClique(t *testing.T, env *cdRBACEnv) string {
	ctx := context.Background()
	domain, err := gputest.NVLDomain("cdctl", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	clique := domain[0].CliqueID()
	for _, name := range cdCtlNodes {
		t.Cleanup(func() { removeNodeAndSlices(t, name) })
		if _, err := framework.CreateReadyNode(ctx, suite.Client, name, nil); err != nil {
			t.Fatal(err)
		}
		dev := resourceapi.Device{Name: nodeplugin.ChannelDevice, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			computedomain.AttrType:     {StringValue: ptr.To(computedomain.TypeChannel)},
			computedomain.AttrID:       {IntValue: ptr.To(int64(0))},
			computedomain.AttrCliqueID: {StringValue: ptr.To(clique)},
		}}
		_, err := suite.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: computedomain.DriverName, NodeName: ptr.To(name),
				Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}, Devices: []resourceapi.Device{dev}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	return clique
}

// cdCtlWork is one controller variant's lifecycle of a ComputeDomain, step by step.
type cdCtlWork struct {
	t      *testing.T
	env    *cdRBACEnv
	id     string
	clique string
	ns     string
	proc   *framework.Process
	domain *cdv1beta1.ComputeDomain
}

// run starts the controller as the variant's ServiceAccount and returns the first step that
// failed, or nil.
func (w *cdCtlWork) run(ctx context.Context, v cdCtlVariant) error {
	w.ns = shortName("cdctl", w.id)
	if err := framework.CreateNamespace(ctx, suite.Client, w.ns, nil); err != nil {
		w.t.Fatal(err)
	}
	kubeconfig, err := w.account(ctx, v)
	if err != nil {
		w.t.Fatal(err)
	}
	var env []string
	if strings.HasPrefix(v.name, "controller-no-list-") {
		// As in TestChartRBACEveryRuleIsNeeded: client-go fills informers with a streaming
		// watch and lists only where the API server cannot stream.
		env = []string{"KUBE_FEATURE_WatchListClient=false"}
	}
	w.proc, err = framework.StartProcess("controller "+w.ns, filepath.Join(w.env.dir, w.ns+"-controller.log"), env, w.env.bin, "controller",
		"--kubeconfig="+kubeconfig, "--namespace="+w.ns, "--daemon-image=example.invalid/cd:test",
		"--daemon-service-account=cd-daemon", "--leader-elect=true", "--health-probe-bind-address=0", "--metrics-bind-address=0")
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(w.cleanup)
	steps := []func(context.Context) error{w.leads, w.createDomain, w.makesObjects, w.putsBackTemplate,
		w.replacesTemplate, w.putsBackDaemonSet, w.putsBackDaemonSetLabel, w.labelsNodes, w.reportsNoClique, w.deletes, w.noForbiddenCalls}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// account creates the variant's ServiceAccount bound to its ClusterRole and, in its namespace,
// its leader Role, and writes its kubeconfig.
func (w *cdCtlWork) account(ctx context.Context, v cdCtlVariant) (string, error) {
	sa := w.ns
	if err := grant(ctx, sa, v.cluster); err != nil {
		return "", err
	}
	c := suite.Client.RbacV1()
	if _, err := c.Roles(w.ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leader"}, Rules: v.named}, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	_, err := c.RoleBindings(w.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: releaseNamespace}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "leader"}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	token, err := framework.ServiceAccountToken(ctx, suite.Client, releaseNamespace, sa, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(w.env.dir, sa+".kubeconfig")
	return path, framework.WriteKubeconfig(path, suite.CP.URL, suite.CP.CAFile, framework.Credentials{Token: token})
}

// cleanup stops the controller and removes what a failed variant left: its domains'
// finalizers, its node labels.
func (w *cdCtlWork) cleanup() {
	ctx := context.Background()
	_ = w.proc.Stop(5 * time.Second)
	var list cdv1beta1.ComputeDomainList
	if err := w.env.client.List(ctx, &list, client.InNamespace(w.ns)); err == nil {
		for i := range list.Items {
			cd := &list.Items[i]
			patch := client.MergeFrom(cd.DeepCopy())
			cd.Finalizers = nil
			_ = w.env.client.Patch(ctx, cd, patch)
			_ = w.env.client.Delete(ctx, cd)
		}
	}
	for _, n := range cdCtlNodes {
		p := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, computedomain.NodeLabel))
		_, _ = suite.Client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, p, metav1.PatchOptions{})
	}
}

// poll waits for cond, but fails at once when the controller's log reports a forbidden call.
func (w *cdCtlWork) poll(ctx context.Context, what string, cond func(ctx context.Context) (bool, error)) error {
	return pollFor(ctx, 15*time.Second, what, func(ctx context.Context) (bool, error) {
		if err := w.noForbiddenCalls(ctx); err != nil {
			return false, err
		}
		return cond(ctx)
	})
}

// noForbiddenCalls: what degrades rather than fails (an informer that cannot list or watch, an
// event the server rejects) shows in the controller's log.
func (w *cdCtlWork) noForbiddenCalls(context.Context) error {
	for line := range strings.Lines(w.proc.Tail(1 << 20)) {
		if strings.Contains(line, "forbidden") {
			return fmt.Errorf("the controller's log reports a forbidden API call: %s", line[:min(len(line), 600)])
		}
	}
	if exited, err := w.proc.Exited(); exited {
		return fmt.Errorf("the controller exited: %v\n%s", err, w.proc.Tail(2000))
	}
	return nil
}

// leads: the controller takes its Lease (get, create), records that it became leader (a
// core/v1 Event about the Lease, create) and renews the Lease (update).
func (w *cdCtlWork) leads(ctx context.Context) error {
	var acquired *metav1.MicroTime
	return w.poll(ctx, "take the leader Lease, record it, and renew it", func(ctx context.Context) (bool, error) {
		l, err := suite.Client.CoordinationV1().Leases(w.ns).Get(ctx, cdCtlLeaderElectionID, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, nil
		}
		if acquired == nil {
			acquired = l.Spec.RenewTime
		}
		events, err := suite.Client.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Lease,involvedObject.name=" + cdCtlLeaderElectionID})
		if err != nil || len(events.Items) == 0 {
			return false, nil
		}
		return l.Spec.RenewTime.After(acquired.Time), nil
	})
}

// createDomain creates a domain of both nodes with a channel template.
func (w *cdCtlWork) createDomain(ctx context.Context) error {
	w.domain = &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "domain"},
		Spec: cdv1beta1.ComputeDomainSpec{NumNodes: len(cdCtlNodes), Channel: &cdv1beta1.ComputeDomainChannelSpec{
			ResourceClaimTemplate: cdv1beta1.ResourceClaimTemplateReference{Name: "domain-channel"}}}}
	if err := w.env.client.Create(ctx, w.domain); err != nil {
		w.t.Fatalf("create ComputeDomain: %v", err)
	}
	return nil
}

// daemonName is the domain's DaemonSet and daemon claim template.
func (w *cdCtlWork) daemonName() string { return controller.DaemonName(string(w.domain.UID)) }

// makesObjects: the finalizer (patch), the clique (status), both claim templates and the
// DaemonSet (create).
func (w *cdCtlWork) makesObjects(ctx context.Context) error {
	return w.poll(ctx, "the finalizer, the clique, the templates and the DaemonSet", func(ctx context.Context) (bool, error) {
		cd := &cdv1beta1.ComputeDomain{}
		if err := w.env.client.Get(ctx, client.ObjectKeyFromObject(w.domain), cd); err != nil {
			return false, nil
		}
		if !slices.Contains(cd.Finalizers, controller.Finalizer) || cd.Status.CliqueID != w.clique {
			return false, nil
		}
		rct := suite.Client.ResourceV1().ResourceClaimTemplates(w.ns)
		_, e1 := rct.Get(ctx, "domain-channel", metav1.GetOptions{})
		_, e2 := rct.Get(ctx, w.daemonName(), metav1.GetOptions{})
		_, e3 := suite.Client.AppsV1().DaemonSets(w.ns).Get(ctx, w.daemonName(), metav1.GetOptions{})
		return errors.Join(e1, e2, e3) == nil, nil
	})
}

// putsBackTemplate: a channel template whose owner reference was removed gets it back, and
// then one whose label was removed gets that back (update). Without its label it is not in the
// controller's cache, whose create then fails, so the controller reads it from the API server
// (get).
func (w *cdCtlWork) putsBackTemplate(ctx context.Context) error {
	for _, edit := range []struct{ patch, what string }{
		{`{"metadata":{"ownerReferences":null}}`, "owner"},
		{`{"metadata":{"labels":null}}`, "label"},
	} {
		if _, err := suite.Client.ResourceV1().ResourceClaimTemplates(w.ns).Patch(ctx, "domain-channel", types.MergePatchType, []byte(edit.patch), metav1.PatchOptions{}); err != nil {
			w.t.Fatal(err)
		}
		err := w.poll(ctx, "put back the channel template's "+edit.what, func(ctx context.Context) (bool, error) {
			tmpl, err := suite.Client.ResourceV1().ResourceClaimTemplates(w.ns).Get(ctx, "domain-channel", metav1.GetOptions{})
			return err == nil && len(tmpl.OwnerReferences) == 1 && tmpl.OwnerReferences[0].UID == w.domain.UID &&
				tmpl.Labels[computedomain.NodeLabel] == string(w.domain.UID), nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// replacesTemplate: a daemon template with another spec (immutable) is replaced (delete,
// create). The test swaps it for one with an extra request, racing the controller's
// re-creation, until its own is in place.
func (w *cdCtlWork) replacesTemplate(ctx context.Context) error {
	rct := suite.Client.ResourceV1().ResourceClaimTemplates(w.ns)
	var swapped types.UID
	for range 10 {
		cur, err := rct.Get(ctx, w.daemonName(), metav1.GetOptions{})
		if err != nil {
			continue
		}
		edited := cur.DeepCopy()
		edited.ObjectMeta = metav1.ObjectMeta{Name: cur.Name, Namespace: cur.Namespace, Labels: cur.Labels, OwnerReferences: cur.OwnerReferences}
		edited.Spec.Spec.Devices.Requests = append(edited.Spec.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "extra",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "compute-domain-daemon.nvidia.com"}})
		if err := rct.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}}); err != nil {
			continue
		}
		if made, err := rct.Create(ctx, edited, metav1.CreateOptions{}); err == nil {
			swapped = made.UID
			break
		}
	}
	if swapped == "" {
		w.t.Fatal("could not swap the daemon template for an edited one")
	}
	return w.poll(ctx, "replace the edited daemon template", func(ctx context.Context) (bool, error) {
		tmpl, err := rct.Get(ctx, w.daemonName(), metav1.GetOptions{})
		return err == nil && tmpl.UID != swapped && len(tmpl.Spec.Spec.Devices.Requests) == 1, nil
	})
}

// putsBackDaemonSet: a DaemonSet whose image was changed gets it back (update).
func (w *cdCtlWork) putsBackDaemonSet(ctx context.Context) error {
	dsc := suite.Client.AppsV1().DaemonSets(w.ns)
	ds, err := dsc.Get(ctx, w.daemonName(), metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	want := ds.Spec.Template.Spec.Containers[0].Image
	ds.Spec.Template.Spec.Containers[0].Image = "example.invalid/other:test"
	if _, err := dsc.Update(ctx, ds, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		w.t.Fatal(err)
	}
	return w.poll(ctx, "put back the DaemonSet's image", func(ctx context.Context) (bool, error) {
		ds, err := dsc.Get(ctx, w.daemonName(), metav1.GetOptions{})
		return err == nil && ds.Spec.Template.Spec.Containers[0].Image == want && ds.Generation > 1, nil
	})
}

// putsBackDaemonSetLabel: a DaemonSet whose labels were removed (so it left the controller's
// cache) is read from the API server (get) and gets its label back (update).
func (w *cdCtlWork) putsBackDaemonSetLabel(ctx context.Context) error {
	dsc := suite.Client.AppsV1().DaemonSets(w.ns)
	if _, err := dsc.Patch(ctx, w.daemonName(), types.MergePatchType, []byte(`{"metadata":{"labels":null}}`), metav1.PatchOptions{}); err != nil {
		w.t.Fatal(err)
	}
	return w.poll(ctx, "put back the DaemonSet's label", func(ctx context.Context) (bool, error) {
		ds, err := dsc.Get(ctx, w.daemonName(), metav1.GetOptions{})
		return err == nil && ds.Labels[computedomain.NodeLabel] == string(w.domain.UID), nil
	})
}

// labelsNodes: the node of an allocated channel claim of the domain gets the domain's label
// (list/watch resourceclaims, patch nodes).
func (w *cdCtlWork) labelsNodes(ctx context.Context) error {
	rw := &cdRBACWork{t: w.t, env: w.env, ns: w.ns, domain: w.domain, node: &cdNode{name: cdCtlNodes[0]}, claims: map[string]fakekubelet.Claim{}}
	rw.allocatedClaim(ctx, nodeplugin.ChannelDevice, "compute-domain-default-channel.nvidia.com", cdv1beta1.ChannelConfigKind)
	return w.poll(ctx, "label the node of the allocated channel", func(ctx context.Context) (bool, error) {
		n, err := suite.Client.CoreV1().Nodes().Get(ctx, cdCtlNodes[0], metav1.GetOptions{})
		return err == nil && n.Labels[computedomain.NodeLabel] == string(w.domain.UID), nil
	})
}

// reportsNoClique: a domain no clique has room for gets a NoClique event (create), and again
// when a slice changes (the repeat patches the event's series).
func (w *cdCtlWork) reportsNoClique(ctx context.Context) error {
	big := &cdv1beta1.ComputeDomain{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "too-big"}, Spec: cdv1beta1.ComputeDomainSpec{NumNodes: 50}}
	if err := w.env.client.Create(ctx, big); err != nil {
		w.t.Fatal(err)
	}
	var seen []string
	count := func(ctx context.Context) int32 {
		list, err := suite.Client.EventsV1().Events(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0
		}
		var n int32
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s series %+v", e.Name, e.Reason, e.Series))
			if e.Regarding.Name == big.Name && e.Reason == controller.ReasonNoClique {
				n += max(1, ptr.Deref(e.Series, eventsv1.EventSeries{}).Count)
			}
		}
		return n
	}
	defer func() { w.t.Logf("events: %q", seen) }()
	if err := w.poll(ctx, "a NoClique event", func(ctx context.Context) (bool, error) { return count(ctx) >= 1, nil }); err != nil {
		return err
	}
	touch := fmt.Appendf(nil, `{"metadata":{"annotations":{"e2e-touch":%q}}}`, w.ns)
	if _, err := suite.Client.ResourceV1().ResourceSlices().Patch(ctx, cdCtlNodes[1], types.MergePatchType, touch, metav1.PatchOptions{}); err != nil {
		w.t.Fatal(err)
	}
	if err := w.poll(ctx, "the NoClique event repeated", func(ctx context.Context) (bool, error) { return count(ctx) >= 2, nil }); err != nil {
		return err
	}
	if err := w.env.client.Delete(ctx, big); err != nil {
		w.t.Fatal(err)
	}
	return w.poll(ctx, "the domain without a clique deleted", func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(w.env.client.Get(ctx, client.ObjectKeyFromObject(big), big)), nil
	})
}

// deletes: deleting the domain removes the node label (patch), the templates and the
// DaemonSet (delete) and the finalizer (patch).
func (w *cdCtlWork) deletes(ctx context.Context) error {
	if err := w.env.client.Delete(ctx, w.domain); err != nil {
		w.t.Fatal(err)
	}
	return w.poll(ctx, "clean up the deleted domain", func(ctx context.Context) (bool, error) {
		if !apierrors.IsNotFound(w.env.client.Get(ctx, client.ObjectKeyFromObject(w.domain), &cdv1beta1.ComputeDomain{})) {
			return false, nil
		}
		n, err := suite.Client.CoreV1().Nodes().Get(ctx, cdCtlNodes[0], metav1.GetOptions{})
		if err != nil || n.Labels[computedomain.NodeLabel] != "" {
			return false, nil
		}
		rct := suite.Client.ResourceV1().ResourceClaimTemplates(w.ns)
		_, e1 := rct.Get(ctx, "domain-channel", metav1.GetOptions{})
		_, e2 := rct.Get(ctx, w.daemonName(), metav1.GetOptions{})
		_, e3 := suite.Client.AppsV1().DaemonSets(w.ns).Get(ctx, w.daemonName(), metav1.GetOptions{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3), nil
	})
}

// removeNodeAndSlices deletes Node name and the ComputeDomain driver's slices of it, so that no
// later test's controller chooses a clique of nodes without a plugin.
func removeNodeAndSlices(t *testing.T, name string) {
	ctx := context.Background()
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: name, resourceapi.ResourceSliceSelectorDriver: computedomain.DriverName}.AsSelector().String()
	err := suite.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Errorf("delete the slices of node %s: %v", name, err)
	}
	if err := suite.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete node %s: %v", name, err)
	}
}
