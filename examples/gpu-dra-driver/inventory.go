package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/gpu"
	"github.com/gpudra/gpudra/mig"
)

func newInventoryCmd() *cobra.Command {
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:     "inventory",
		Short:   "print GPUs, MIG devices and capacity used/free",
		Example: "  gpu-dra-driver inventory --machine dgx-a100-40gb --mig-config all-balanced\n  gpu-dra-driver inventory --nvml=real -o yaml\n  gpu-dra-driver inventory --nvml=real --mig-geometry",
		Args:    noArgs,
	}
	nf.register(cmd, flagNVML, flagMachine, flagMIGConfig)
	output := outputFlag(cmd, "output format: table, yaml or json", "table", "yaml", "json")
	geometry := cmd.Flags().Bool("mig-geometry", false, "print, per product, the MIG geometry the GPUs report and where the built-in catalog differs from it, instead of the inventory (table output only)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := oneOf("output", *output, "table", "yaml", "json"); err != nil {
			return err
		}
		if *geometry && *output != "table" {
			return usageErrorf("--mig-geometry prints a table only, not -o %s", *output)
		}
		n, err := nf.open(cmd.Context())
		if err != nil {
			return err
		}
		defer n.close()
		if *geometry {
			return printMIGGeometry(cmd.OutOrStdout(), n.inv)
		}
		return writeInventory(cmd.OutOrStdout(), *output, n.inv)
	})
	return cmd
}

func writeInventory(w io.Writer, output string, inv *gpu.Inventory) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(inv)
	case "yaml":
		b, err := yaml.Marshal(inv)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return printInventory(w, inv)
}

func gib(b uint64) string { return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30)) }

func printInventory(w io.Writer, inv *gpu.Inventory) error {
	fmt.Fprintf(w, "driver %s, CUDA %s, %d GPUs\n\n", inv.DriverVersion, majorMinor(inv.CUDADriverVersion), len(inv.GPUs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tMINOR\tPRODUCT\tARCH\tCC\tMEMORY\tPCI BUS ID\tNUMA\tMIG\tMEMORY SLICES USED/FREE\tUUID")
	for _, g := range inv.GPUs {
		migState := "n/a"
		usage := "-"
		if g.MIGCapable {
			migState = "disabled"
			if g.MIGEnabled {
				migState = fmt.Sprintf("enabled (%d devices)", len(g.MIGDevices))
				usage = migSliceUsage(g)
			}
			if g.MIGPending != g.MIGEnabled {
				migState += " (pending change)"
			}
		}
		numa := "-"
		if g.NUMANode >= 0 {
			numa = fmt.Sprint(g.NUMANode)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Minor, g.ProductName, g.Architecture,
			majorMinor(g.CudaComputeCapability), gib(g.MemoryBytes), g.PCIBusID, numa, migState, usage, g.UUID)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var migs int
	for _, g := range inv.GPUs {
		migs += len(g.MIGDevices)
	}
	if migs == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// PROFILE ID is NVML's GPU-instance profile ID, as mig profiles lists it and the device name
	// embeds it; GI INSTANCE and CI INSTANCE are the instance IDs NVML assigned (nvidia-smi mig
	// -lgi and -lci call them Instance ID / GI ID and CI ID).
	fmt.Fprintln(tw, "GPU\tDEVICE\tPROFILE\tPROFILE ID\tPLACEMENT\tGI INSTANCE\tCI INSTANCE\tMEMORY\tSMS\tUUID")
	for _, g := range inv.GPUs {
		for _, m := range g.MIGDevices {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d:%d\t%d\t%d\t%s\t%d\t%s\n", g.Index, gpudra.MIGDeviceNameOf(&m), m.Profile, m.GIProfileID,
				m.Placement.Start, m.Placement.Size, m.GIID, m.CIID, gib(m.MemoryBytes), m.Multiprocessors, m.UUID)
		}
	}
	return tw.Flush()
}

// majorMinor prints a version NVIDIA numbers major.minor (compute capability, CUDA) as NVIDIA's
// tools and mig profiles do: "8.0", not the semantic version "8.0.0" the inventory holds and the
// published attributes carry (CEL compares those with semver()).
func majorMinor(v string) string {
	if major, rest, ok := strings.Cut(v, "."); ok {
		if minor, patch, ok := strings.Cut(rest, "."); ok && patch == "0" {
			return major + "." + minor
		}
	}
	return v
}

// migSliceUsage reports how many memory slices the GPU's MIG instances occupy and how many are
// free (each GPU instance counted once, however many compute instances it holds).
func migSliceUsage(g gpu.GPU) string {
	m, err := mig.Lookup(g.ProductName)
	if err != nil {
		return "?"
	}
	used := map[int]bool{}
	for _, d := range g.MIGDevices {
		for i := d.Placement.Start; i < d.Placement.Start+d.Placement.Size; i++ {
			used[i] = true
		}
	}
	return fmt.Sprintf("%d/%d", len(used), m.MemorySlices-len(used))
}

// printMIGGeometry says, per product in the order of its first GPU, whether its GPUs support MIG,
// the MIG geometry they report (read from the first MIG-capable GPU of the product), and every
// difference from the built-in catalog (mig.Compare), as the kubelet plugin logs them at start.
func printMIGGeometry(w io.Writer, inv *gpu.Inventory) error {
	var products []string
	gpus := map[string][]string{}
	geometry := map[string]*gpu.MIGGeometry{}
	capable := map[string]bool{}
	for _, g := range inv.GPUs {
		if _, seen := gpus[g.ProductName]; !seen {
			products = append(products, g.ProductName)
		}
		gpus[g.ProductName] = append(gpus[g.ProductName], fmt.Sprint(g.Index))
		if g.MIGCapable {
			capable[g.ProductName] = true
			if geometry[g.ProductName] == nil {
				geometry[g.ProductName] = g.MIGGeometry
			}
		}
	}
	for _, p := range products {
		fmt.Fprintf(w, "%s (GPU %s): ", p, strings.Join(gpus[p], ", "))
		geo := geometry[p]
		switch {
		case !capable[p]:
			fmt.Fprintln(w, "no MIG")
			continue
		case geo == nil:
			fmt.Fprintln(w, "MIG geometry not read")
			continue
		case geo.Err != nil:
			fmt.Fprintf(w, "MIG geometry could not be read from the GPU (the built-in catalog is used): %v\n", geo.Err)
			continue
		}
		fmt.Fprintf(w, "MIG geometry read from the GPU: %d memory slices, %d compute slices, %d GPU-instance profiles; ",
			geo.Model.MemorySlices, geo.Model.ComputeSlices, len(geo.Model.Profiles))
		if len(geo.CatalogDifferences) == 0 {
			fmt.Fprintln(w, "the catalog agrees")
			continue
		}
		fmt.Fprintf(w, "%d differences from the catalog (the GPU's values are used):\n", len(geo.CatalogDifferences))
		for _, d := range geo.CatalogDifferences {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	for _, e := range inv.Errors {
		fmt.Fprintf(w, "GPU %d not enumerated: %v\n", e.Index, e)
	}
	return nil
}
