package imex_test

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Example renders the files node-b's daemon writes for a domain whose status lists three
// nodes of its clique and one of another.
func Example() {
	const clique = "5e1c4f2a-9d3b-4c7e-8a6f-2b1d0c9e8f7a.3"
	domain := &v1beta1.ComputeDomain{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train"},
		Status: v1beta1.ComputeDomainStatus{CliqueID: clique, Nodes: []v1beta1.ComputeDomainNode{
			{Name: "node-c", IPAddress: "10.244.1.9", CliqueID: clique, Status: v1beta1.StatusReady},
			{Name: "node-a", IPAddress: "10.244.7.2", CliqueID: clique, Status: v1beta1.StatusNotReady},
			{Name: "node-x", IPAddress: "10.244.5.5", CliqueID: "another-cluster.1", Status: v1beta1.StatusReady},
		}},
	}
	self := netip.MustParseAddr("10.244.3.17")
	config, err := imex.IMEXConfig{Dir: "/imexd", BindIP: self}.Render()
	if err != nil {
		fmt.Println(err)
		return
	}
	nodes, err := imex.RenderNodes(imex.Peers(domain, "node-b", self, clique))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s:\n%s\n%s:\n%s", imex.ConfigFile, config, imex.NodesFile, nodes)
	// Output:
	// config.cfg:
	// # Written by the gpudra IMEX daemon; rewritten on every start.
	// DAEMONIZE=0
	// BIND_INTERFACE_IP=10.244.3.17
	// SERVER_PORT=50000
	// IMEX_NODE_CONFIG_FILE=/imexd/nodes_config.cfg
	// LOG_FILE_NAME=/imexd/nvidia-imex.log
	// IMEX_CMD_ENABLED=1
	// IMEX_CMD_BIND_INTERFACE_IP=127.0.0.1
	// IMEX_CMD_PORT=50005
	//
	// nodes_config.cfg:
	// 10.244.7.2
	// 10.244.3.17
	// 10.244.1.9
}
