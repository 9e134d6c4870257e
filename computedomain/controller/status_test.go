package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// entry is a status entry of node in clique with status; the index is left to the controller.
func entry(node, clique, status string) cdv1beta1.ComputeDomainNode {
	return cdv1beta1.ComputeDomainNode{Name: node, IPAddress: "10.0.0." + node[len(node)-1:], CliqueID: clique, Status: status}
}

// indexed is e with index i.
func indexed(e cdv1beta1.ComputeDomainNode, i int) cdv1beta1.ComputeDomainNode {
	e.Index = i
	return e
}

func TestDomainReady(t *testing.T) {
	const ready, notReady = "Ready", "NotReady"
	tests := []struct {
		name     string
		numNodes int
		entries  []cdv1beta1.ComputeDomainNode
		want     bool
	}{
		{"numNodes 2, two Ready in the clique", 2, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, ready)}, true},
		{"numNodes 2, more Ready than needed", 2, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, ready), entry("n3", cliqueA, ready)}, true},
		{"numNodes 2, one Ready and one NotReady", 2, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, notReady)}, false},
		{"numNodes 2, two Ready and a third NotReady", 2, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, notReady), entry("n3", cliqueA, ready)}, true},
		{"numNodes 2, one Ready node of another clique", 2, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueB, ready)}, false},
		{"numNodes 1, no entry", 1, nil, false},
		{"numNodes 0, no entry", 0, nil, false},
		{"numNodes 0, every entry Ready", 0, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, ready)}, true},
		{"numNodes 0, one entry NotReady", 0, []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, ready), entry("n2", cliqueA, notReady)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := domainReady(tt.numNodes, cliqueA, tt.entries); got != tt.want {
				t.Errorf("domainReady(%d, %v) = %v, want %v", tt.numNodes, tt.entries, got, tt.want)
			}
		})
	}
}

func TestAssignIndexes(t *testing.T) {
	entries := []cdv1beta1.ComputeDomainNode{
		indexed(entry("n3", cliqueA, "Ready"), 7),
		entry("n1", cliqueA, "Ready"),
		entry("n0", cliqueB, "Ready"),
		entry("n2", cliqueA, "NotReady"),
		indexed(entry("n4", cliqueB, "Ready"), 3),
	}
	assignIndexes(entries)
	want := []cdv1beta1.ComputeDomainNode{
		indexed(entry("n3", cliqueA, "Ready"), 2),
		indexed(entry("n1", cliqueA, "Ready"), 0),
		indexed(entry("n0", cliqueB, "Ready"), 0),
		indexed(entry("n2", cliqueA, "NotReady"), 1),
		indexed(entry("n4", cliqueB, "Ready"), 1),
	}
	if diff := cmp.Diff(want, entries); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}
}

// TestReconcileStatus: entries of nodes that are gone or run no daemon pod are pruned, the
// rest indexed, and the domain Ready by the rule.
func TestReconcileStatus(t *testing.T) {
	const uid = "uid-1"
	tests := []struct {
		name     string
		numNodes int
		was      string // the domain's status before, NotReady when empty
		entries  []cdv1beta1.ComputeDomainNode
		objs     []client.Object
		want     cdv1beta1.ComputeDomainStatus
	}{
		{
			name: "Ready", numNodes: 2,
			entries: []cdv1beta1.ComputeDomainNode{entry("n2", cliqueA, "Ready"), entry("n1", cliqueA, "Ready")},
			objs:    []client.Object{newNode("n1"), newNode("n2"), daemonPod(uid, "n1", corev1.PodRunning), daemonPod(uid, "n2", corev1.PodRunning)},
			want: cdv1beta1.ComputeDomainStatus{Status: "Ready", CliqueID: cliqueA, Nodes: []cdv1beta1.ComputeDomainNode{
				indexed(entry("n2", cliqueA, "Ready"), 1), indexed(entry("n1", cliqueA, "Ready"), 0),
			}},
		},
		{
			name: "a node whose Node is gone is pruned", numNodes: 2,
			entries: []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, "Ready"), entry("n2", cliqueA, "Ready"), entry("n3", cliqueA, "Ready")},
			objs:    []client.Object{newNode("n2"), newNode("n3"), daemonPod(uid, "n1", corev1.PodRunning), daemonPod(uid, "n2", corev1.PodRunning), daemonPod(uid, "n3", corev1.PodRunning)},
			want: cdv1beta1.ComputeDomainStatus{Status: "Ready", CliqueID: cliqueA, Nodes: []cdv1beta1.ComputeDomainNode{
				indexed(entry("n2", cliqueA, "Ready"), 0), indexed(entry("n3", cliqueA, "Ready"), 1),
			}},
		},
		{
			name: "a node without a daemon pod of the domain is pruned", numNodes: 2,
			entries: []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, "Ready"), entry("n2", cliqueA, "Ready")},
			objs:    []client.Object{newNode("n1"), newNode("n2"), daemonPod(uid, "n1", corev1.PodRunning), daemonPod("uid-other", "n2", corev1.PodRunning)},
			want: cdv1beta1.ComputeDomainStatus{Status: "NotReady", CliqueID: cliqueA, Nodes: []cdv1beta1.ComputeDomainNode{
				indexed(entry("n1", cliqueA, "Ready"), 0),
			}},
		},
		{
			name: "a node whose daemon pod failed is pruned", numNodes: 1,
			entries: []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, "Ready"), entry("n2", cliqueA, "Ready")},
			objs:    []client.Object{newNode("n1"), newNode("n2"), daemonPod(uid, "n1", corev1.PodFailed), daemonPod(uid, "n2", corev1.PodPending)},
			want: cdv1beta1.ComputeDomainStatus{Status: "Ready", CliqueID: cliqueA, Nodes: []cdv1beta1.ComputeDomainNode{
				indexed(entry("n2", cliqueA, "Ready"), 0),
			}},
		},
		{
			name: "numNodes 0 with a NotReady node", numNodes: 0,
			entries: []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, "Ready"), entry("n2", cliqueA, "NotReady")},
			objs:    []client.Object{newNode("n1"), newNode("n2"), daemonPod(uid, "n1", corev1.PodRunning), daemonPod(uid, "n2", corev1.PodRunning)},
			want: cdv1beta1.ComputeDomainStatus{Status: "NotReady", CliqueID: cliqueA, Nodes: []cdv1beta1.ComputeDomainNode{
				indexed(entry("n1", cliqueA, "Ready"), 0), indexed(entry("n2", cliqueA, "NotReady"), 1),
			}},
		},
		{
			name: "a Ready domain whose node left is NotReady", numNodes: 1, was: "Ready",
			entries: []cdv1beta1.ComputeDomainNode{entry("n1", cliqueA, "Ready")},
			objs:    []client.Object{newNode("n1")},
			want:    cdv1beta1.ComputeDomainStatus{Status: "NotReady", CliqueID: cliqueA},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cd := withStatus(newDomain("training", uid, tt.numNodes, ""), cliqueA, tt.entries...)
			if tt.was != "" {
				cd.Status.Status = tt.was
			}
			e := newEnv(t, nil, append(tt.objs, cd)...)
			e.reconcile("team-a", "training")
			if diff := cmp.Diff(tt.want, e.domain("team-a", "training").Status); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
