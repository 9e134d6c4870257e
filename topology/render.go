package topology

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Render returns t as text in the manner of `nvidia-smi topo -m`: a matrix with a GPU<i> row and
// column per GPU, X on the diagonal, the link of every other pair (NV# or the PCIe level) and
// each GPU's NUMA node; when any pair has NVLinks, a second matrix of the PCIe levels the NV#
// entries hide; then a table of bus IDs, PCIe roots (marked "(derived)" when not from
// sysfs) and NVLink counts; then the NVLink islands (Islands), the PCIe switches that differ from
// their root (PCIeSwitches) and the NVLink domains, each if any; then a legend. Columns are aligned
// with spaces and the output ends with a newline.
func Render(t *Topology) string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	matrix(&b, t, func(l Link) string { return l.String() })
	if hasNVLink(t) {
		b.WriteString("\nPCIe paths under the NVLinks:\n")
		matrix(&b, t, func(l Link) string { return l.PCIe.String() })
	}
	b.WriteString("\n")
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprint(w, "\tBus ID\tPCIe Root\tNVLinks\n")
	for i, g := range t.GPUs {
		root := orNA(g.PCIeRoot)
		if g.PCIeRootSource == RootDerived {
			root += " (derived)"
		}
		fmt.Fprintf(w, "GPU%d\t%s\t%s\t%d\n", i, orNA(g.PCIBusID), root, g.NVLinks)
	}
	_ = w.Flush()

	groups(&b, "NVLink islands", t.Islands())
	groups(&b, "PCIe switches below a shared root", t.PCIeSwitches())
	if len(t.Domains) > 0 {
		b.WriteString("\nNVLink domains:\n")
		for _, d := range t.Domains {
			fmt.Fprintf(&b, "  cluster %s clique %d: %s\n", d.ClusterUUID, d.CliqueID, gpuNames(d.GPUs))
		}
	}

	b.WriteString(legend)
	return b.String()
}

// groups writes one line per group, "  <id>: GPU0 GPU1", under a title; nothing when there are
// none.
func groups(b *strings.Builder, title string, gs []Group) {
	if len(gs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	for _, g := range gs {
		fmt.Fprintf(b, "  %s: %s\n", g.ID, gpuNames(g.GPUs))
	}
}

func gpuNames(gpus []int) string {
	names := make([]string, len(gpus))
	for k, i := range gpus {
		names[k] = fmt.Sprintf("GPU%d", i)
	}
	return strings.Join(names, " ")
}

// matrix writes the GPU×GPU matrix with cell(link) off the diagonal and the NUMA column.
func matrix(b *strings.Builder, t *Topology, cell func(Link) string) {
	w := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for i := range t.GPUs {
		fmt.Fprintf(w, "\tGPU%d", i)
	}
	fmt.Fprint(w, "\tNUMA Affinity\n")
	for i, g := range t.GPUs {
		fmt.Fprintf(w, "GPU%d", i)
		for j := range t.GPUs {
			if i == j {
				fmt.Fprint(w, "\tX")
			} else {
				fmt.Fprintf(w, "\t%s", cell(t.Link(i, j)))
			}
		}
		fmt.Fprintf(w, "\t%s\n", numa(g.NUMANode))
	}
	_ = w.Flush()
}

func hasNVLink(t *Topology) bool {
	for i := range t.Links {
		for j := range t.Links[i] {
			if t.Links[i][j].NVLinks > 0 {
				return true
			}
		}
	}
	return false
}

// legend explains the matrix entries in gpudra's own words.
const legend = `
Legend:
  X     the GPU itself
  NV#   # NVLinks between the two GPUs, direct or through NVSwitches
  PIX   PCIe, through at most one PCIe bridge
  PXB   PCIe, through several PCIe bridges but no host bridge
  PHB   PCIe, through a PCIe host bridge (the CPU's root complex)
  NODE  PCIe, between host bridges of one NUMA node
  SYS   PCIe, across the interconnect between NUMA nodes (UPI, xGMI, ...)
  N/A   not reported by NVML
`

func numa(n int) string {
	if n < 0 {
		return "N/A"
	}
	return strconv.Itoa(n)
}

func orNA(s string) string {
	if s == "" {
		return "N/A"
	}
	return s
}
