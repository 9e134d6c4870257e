package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpudra/gpudra/topology"
)

// topoJSON is what topo -o json prints: the topology, and the best set when --best asks for one.
type topoJSON struct {
	*topology.Topology
	BestSet []int `json:"bestSet,omitempty"`
}

func newTopoCmd() *cobra.Command {
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "the GPU topology matrix (NVLink, PCIe, NUMA) of the machine",
		Long: `topo prints the machine's GPU topology in the manner of nvidia-smi topo -m: the link between
every pair of GPUs, NUMA nodes, PCIe roots and NVLink domains. --best N also picks the
best-connected set of N GPUs.`,
		Example: "  gpu-dra-driver topo --machine dgx-h100 --best 4\n  gpu-dra-driver topo --nvml=real -o json",
		Args:    noArgs,
	}
	nf.register(cmd, flagNVML, flagMachine)
	output := outputFlag(cmd, "output format: table (nvidia-smi topo -m style) or json", "table", "json")
	best := cmd.Flags().Int("best", 0, "also print the best-connected set of this many GPUs (1 to the number of GPUs)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := oneOf("output", *output, "table", "json"); err != nil {
			return err
		}
		asked := changed(cmd.Flags(), "best")
		if asked && *best < 1 {
			return usageErrorf("--best=%d: want a number of GPUs, at least 1", *best)
		}
		n, err := nf.open(cmd.Context())
		if err != nil {
			return err
		}
		defer n.close()
		out := topoJSON{Topology: n.topo}
		if asked {
			if *best > len(n.topo.GPUs) {
				return usageErrorf("--best=%d: %s has %d GPUs", *best, nf.machineLabel(), len(n.topo.GPUs))
			}
			if out.BestSet, err = topology.BestSet(n.topo, *best, nil); err != nil {
				return err
			}
		}
		w := cmd.OutOrStdout()
		if *output == "json" {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		fmt.Fprint(w, topology.Render(n.topo))
		if asked {
			fmt.Fprintf(w, "\nbest set of %d GPUs: %v\n", *best, out.BestSet)
		}
		return nil
	})
	return cmd
}
