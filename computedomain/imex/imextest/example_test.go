package imextest_test

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
)

// Example checks the files package imex writes as the fake nvidia-imex does when it starts.
func Example() {
	dir, err := os.MkdirTemp("", "imexd")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	self := netip.MustParseAddr("10.244.3.17")
	c := imex.IMEXConfig{Dir: dir, BindIP: self}
	w := imex.NewWriter()
	if err := w.WriteConfig(c); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := w.WriteNodes(c, []netip.Addr{netip.MustParseAddr("10.244.7.2"), self}); err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := imextest.ParseConfig(c.ConfigPath())
	if err != nil {
		fmt.Println(err)
		return
	}
	nodes, err := imextest.ParseNodes(cfg.NodesFile, cfg.BindIP)
	fmt.Println(cfg.BindIP, cfg.ServerPort, cfg.CmdEnabled, cfg.CmdPort, nodes, err)
	// Output:
	// 10.244.3.17 50000 true 50005 [10.244.7.2 10.244.3.17] <nil>
}
