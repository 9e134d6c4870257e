package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/gpudra/gpudra/computedomain"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// ReasonNoClique is the reason of the event on a domain that no clique has room for.
const ReasonNoClique = "NoClique"

// maxCliqueID is the longest clique ID the controller accepts (a UUID, a dot and a number fit
// many times over).
const maxCliqueID = 128

// validClique says whether id is a clique ID the controller puts into a selector:
// "<cluster UUID>.<clique ID>" from the GPUs' fabric info, so 1 to 128 letters, digits, '.',
// '_' and '-'. The controller writes clique IDs into CEL string literals, so nothing else.
func validClique(id string) bool {
	if id == "" || len(id) > maxCliqueID {
		return false
	}
	for _, c := range id {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// cliqueRoom is how many nodes of a clique a domain could have.
type cliqueRoom struct {
	ID   string
	Free int
}

// cliqueWorld is what the clique choice reads: the driver's slices, the nodes and the domains.
type cliqueWorld struct {
	Slices  []resourcev1.ResourceSlice
	Nodes   []corev1.Node
	Domains []cdv1beta1.ComputeDomain
}

// chooseClique picks the clique for cd: the one with the most free nodes among those with at
// least max(numNodes, 1), ties to the lower ID; "" when none has room. It also returns every
// clique's room, by ID. A node is free unless it carries another domain's NodeLabel; the room
// other domains pinned to a clique still need (numNodes less their labelled nodes) is not.
func chooseClique(cd *cdv1beta1.ComputeDomain, w *cliqueWorld) (string, []cliqueRoom) {
	members := cliqueMembers(w.Slices)
	owner := make(map[string]string, len(w.Nodes)) // node → the domain its label names, or ""
	labelled := map[string]int{}                   // domain UID → its labelled nodes
	for _, n := range w.Nodes {
		uid := n.Labels[computedomain.NodeLabel]
		owner[n.Name] = uid
		if uid != "" {
			labelled[uid]++
		}
	}
	free := map[string]int{}
	for clique, nodes := range members {
		for node := range nodes {
			if uid, exists := owner[node]; exists && (uid == "" || uid == string(cd.UID)) {
				free[clique]++
			}
		}
	}
	for _, o := range w.Domains {
		if o.UID == cd.UID || !o.DeletionTimestamp.IsZero() || o.Status.CliqueID == "" {
			continue
		}
		if need := o.Spec.NumNodes - labelled[string(o.UID)]; need > 0 {
			free[o.Status.CliqueID] -= need
		}
	}
	return pickClique(members, free, max(cd.Spec.NumNodes, 1))
}

// pickClique returns the clique with the most free nodes, at least need, ties to the lower ID,
// and the room of every clique by ID.
func pickClique(members map[string]sets.Set[string], free map[string]int, need int) (string, []cliqueRoom) {
	rooms := make([]cliqueRoom, 0, len(members))
	for id := range members {
		rooms = append(rooms, cliqueRoom{ID: id, Free: max(free[id], 0)})
	}
	slices.SortFunc(rooms, func(a, b cliqueRoom) int { return cmp.Compare(a.ID, b.ID) })
	best := -1
	for i, r := range rooms {
		if r.Free >= need && (best < 0 || r.Free > rooms[best].Free) {
			best = i
		}
	}
	if best < 0 {
		return "", rooms
	}
	return rooms[best].ID, rooms
}

// cliqueMembers maps each clique to the nodes with a channel device in it, from the current
// generation of each node's pool of the driver.
func cliqueMembers(all []resourcev1.ResourceSlice) map[string]sets.Set[string] {
	generation := map[string]int64{}
	for _, s := range all {
		if s.Spec.Driver == computedomain.DriverName {
			generation[s.Spec.Pool.Name] = max(generation[s.Spec.Pool.Name], s.Spec.Pool.Generation)
		}
	}
	members := map[string]sets.Set[string]{}
	for _, s := range all {
		if s.Spec.Driver != computedomain.DriverName || s.Spec.Pool.Generation < generation[s.Spec.Pool.Name] || s.Spec.NodeName == nil {
			continue
		}
		for _, d := range s.Spec.Devices {
			if stringAttr(d, computedomain.AttrType) != computedomain.TypeChannel {
				continue
			}
			clique := stringAttr(d, computedomain.AttrCliqueID)
			if !validClique(clique) {
				continue
			}
			if members[clique] == nil {
				members[clique] = sets.New[string]()
			}
			members[clique].Insert(*s.Spec.NodeName)
		}
	}
	return members
}

// stringAttr is the driver's string attribute name of d, written short or qualified; "" when
// d has none.
func stringAttr(d resourcev1.Device, name string) string {
	for _, key := range []resourcev1.QualifiedName{
		resourcev1.QualifiedName(name),
		resourcev1.QualifiedName(computedomain.DriverName + "/" + name),
	} {
		if a, ok := d.Attributes[key]; ok && a.StringValue != nil {
			return *a.StringValue
		}
	}
	return ""
}

// noCliqueNote says why no clique has room for cd.
func noCliqueNote(cd *cdv1beta1.ComputeDomain, rooms []cliqueRoom) string {
	need := max(cd.Spec.NumNodes, 1)
	if len(rooms) == 0 {
		return fmt.Sprintf("no NVLink clique for the domain's %d node(s): no node publishes a %s channel with a %s attribute", need, computedomain.DriverName, computedomain.AttrCliqueID)
	}
	parts := make([]string, len(rooms))
	for i, r := range rooms {
		parts[i] = fmt.Sprintf("%s has %d", r.ID, r.Free)
	}
	return fmt.Sprintf("no NVLink clique has %d free node(s) for the domain: %s", need, strings.Join(parts, ", "))
}

// ensureClique chooses cd's clique once and records it in cd's status; it says whether cd
// has one. A domain that none has room for gets a NoClique event.
func (r *Reconciler) ensureClique(ctx context.Context, cd *cdv1beta1.ComputeDomain) (bool, error) {
	if cd.Status.CliqueID != "" {
		if !validClique(cd.Status.CliqueID) {
			return false, fmt.Errorf("ComputeDomain %s: status.cliqueID %q is not a clique ID (<cluster UUID>.<clique ID>: letters, digits, '.', '_', '-')", klog.KObj(cd), cd.Status.CliqueID)
		}
		return true, nil
	}
	w, err := r.readCliqueWorld(ctx)
	if err != nil {
		return false, err
	}
	clique, rooms := chooseClique(cd, w)
	logger := klog.FromContext(ctx)
	if clique == "" {
		note := noCliqueNote(cd, rooms)
		logger.V(2).Info("No clique has room for the domain", "reason", note)
		r.recorder.Eventf(cd, nil, corev1.EventTypeWarning, ReasonNoClique, "ChooseClique", "%s", note)
		return false, r.writeStatus(ctx, cd, func(st *cdv1beta1.ComputeDomainStatus) { st.Status = cdv1beta1.StatusNotReady })
	}
	logger.Info("Chose the domain's NVLink clique", "cliqueID", clique, "rooms", rooms)
	err = r.writeStatus(ctx, cd, func(st *cdv1beta1.ComputeDomainStatus) {
		st.CliqueID = clique
		if st.Status == "" {
			st.Status = cdv1beta1.StatusNotReady
		}
	})
	if err != nil {
		return false, err
	}
	r.pins.add(cd.UID, clique)
	return true, nil
}

// pins are the cliques this controller chose and wrote, by domain UID: the next domain's
// choice counts them even before the manager's cache shows the status writes. Safe for
// concurrent use; a domain's pin goes with its cleanup.
type pins struct {
	mu     sync.Mutex
	clique map[types.UID]string
}

// add records that the domain with uid is pinned to clique.
func (p *pins) add(uid types.UID, clique string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clique == nil {
		p.clique = map[types.UID]string{}
	}
	p.clique[uid] = clique
}

// remove forgets the pin of the domain with uid.
func (p *pins) remove(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.clique, uid)
}

// fill sets the clique of each domain whose status (read from a cache that may lag) has none
// but that this controller pinned.
func (p *pins) fill(domains []cdv1beta1.ComputeDomain) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range domains {
		if c, ok := p.clique[domains[i].UID]; ok && domains[i].Status.CliqueID == "" {
			domains[i].Status.CliqueID = c
		}
	}
}
