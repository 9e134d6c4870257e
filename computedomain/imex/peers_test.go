package imex_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

func TestPeers(t *testing.T) {
	n := func(name, ip, clq string) v1beta1.ComputeDomainNode {
		return v1beta1.ComputeDomainNode{Name: name, IPAddress: ip, CliqueID: clq, Status: v1beta1.StatusNotReady}
	}
	for _, tc := range []struct {
		name  string
		nodes []v1beta1.ComputeDomainNode
		want  []string
	}{
		{name: "alone, not yet in the status", want: []string{"10.0.0.1"}},
		{name: "sorted by node name, not by address", nodes: []v1beta1.ComputeDomainNode{
			n("node-c", "10.0.0.0", clique), n("node-a", "10.0.0.1", clique), n("node-0", "10.0.0.9", clique),
		}, want: []string{"10.0.0.9", "10.0.0.1", "10.0.0.0"}},
		{name: "other cliques and bad addresses left out", nodes: []v1beta1.ComputeDomainNode{
			n("node-b", "10.0.0.2", "other.1"), n("node-c", "not-an-ip", clique), n("node-d", "10.0.0.4", clique),
		}, want: []string{"10.0.0.1", "10.0.0.4"}},
		{name: "own entry's stale address replaced", nodes: []v1beta1.ComputeDomainNode{n("node-a", "10.9.9.9", clique)}, want: []string{"10.0.0.1"}},
		{name: "an address twice kept once", nodes: []v1beta1.ComputeDomainNode{
			n("node-b", "10.0.0.2", clique), n("node-c", "10.0.0.2", clique),
		}, want: []string{"10.0.0.1", "10.0.0.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, a := range imex.Peers(newDomain(tc.nodes...), "node-a", netip.MustParseAddr("10.0.0.1"), clique) {
				got = append(got, a.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Peers (-want +got):\n%s", diff)
			}
		})
	}
}
