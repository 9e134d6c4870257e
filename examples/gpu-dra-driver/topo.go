package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/gpudra/gpudra/topology"
)

func runTopo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("topo", stderr)
	var nf nodeFlags
	nf.register(fs)
	output := fs.String("o", "table", "output format: table (nvidia-smi topo -m style) or json")
	best := fs.Int("best", 0, "also print the best-connected set of this many GPUs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := oneOf("o", *output, "table", "json"); err != nil {
		return err
	}
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(n.topo)
	}
	fmt.Fprint(stdout, topology.Render(n.topo))
	if *best > 0 {
		set, err := topology.BestSet(n.topo, *best, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nbest set of %d GPUs: %v\n", *best, set)
	}
	return nil
}
