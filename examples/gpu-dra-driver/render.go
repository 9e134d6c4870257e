package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
)

// renderOptions are render's own flags.
type renderOptions struct {
	output           string
	template         bool
	templateVersions bool
}

func newRenderCmd() *cobra.Command {
	var (
		nf nodeFlags
		ro renderOptions
	)
	cmd := &cobra.Command{
		Use:   "render",
		Short: "print the DeviceClasses and ResourceSlices the driver publishes (YAML stream)",
		Long: `render prints every DeviceClass the driver ships followed by every ResourceSlice it would publish
for the machine, as complete resource.k8s.io/v1 objects: a multi-document YAML stream that
kubectl apply -f - accepts, or a v1 List with -o json.

With --template it prints only the ResourceSlices, as templates for autoscalers
(cluster-autoscaler, Karpenter) that simulate a node of this GPU type before it exists: node
name, pool and slice names are those of the node "` + gpudra.TemplateNodeName + `" (or --node-name when
given), and what identifies one node's hardware or software is left out (uuid, parentUUID,
pciBusID, driver versions unless --template-driver-versions, health taints). Everything else
equals what serve publishes on such a node with the same flags.`,
		Example: `  gpu-dra-driver render --machine l4x8
  gpu-dra-driver render --machine dgx-a100-40gb --mig-config all-balanced
  gpu-dra-driver render --template --machine dgx-h100 --dynamic-mig
  gpu-dra-driver render --nvml=real -o json`,
		Args: noArgs,
	}
	nf.register(cmd, allNodeFlags...)
	nf.registerPassthrough(cmd)
	nf.registerMIGPublishing(cmd)
	output := outputFlag(cmd, "output format: yaml (multi-document stream) or json (a v1 List)", "yaml", "json")
	cmd.Flags().BoolVar(&ro.template, "template", false, "print slice templates for autoscalers instead of this node's objects")
	cmd.Flags().BoolVar(&ro.templateVersions, "template-driver-versions", false, "keep driverVersion and cudaDriverVersion in --template output (every node runs this NVIDIA driver)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := oneOf("output", *output, "yaml", "json"); err != nil {
			return err
		}
		if ro.templateVersions && !ro.template {
			return usageErrorf("--template-driver-versions needs --template")
		}
		ro.output = *output
		if ro.template && !cmd.Flags().Changed(flagNodeName) {
			nf.nodeName = gpudra.TemplateNodeName
		}
		return render(cmd.Context(), &nf, ro, cmd.OutOrStdout())
	})
	return cmd
}

func render(ctx context.Context, nf *nodeFlags, ro renderOptions, stdout io.Writer) error {
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	b := gpudra.NewBuilder(nf.builderOptions(n)...)
	if ro.template {
		return renderTemplates(b, nf, n, ro, stdout)
	}
	res, err := b.Build(nf.nodeName, n.inv)
	if err != nil {
		return err
	}
	slices, err := gpudra.ResourceSlices(b.DriverName(), nf.nodeName, res)
	if err != nil {
		return err
	}
	var objs []runtime.Object
	for _, c := range selectors.DeviceClasses(b.DriverName()) {
		objs = append(objs, c)
	}
	for _, s := range slices {
		objs = append(objs, s)
	}
	return writeObjects(stdout, ro.output, objs)
}

// renderTemplates prints the slice templates of the machine.
func renderTemplates(b *gpudra.Builder, nf *nodeFlags, n *node, ro renderOptions, stdout io.Writer) error {
	opts := []gpudra.TemplateOption{gpudra.WithTemplateNodeName(nf.nodeName)}
	if ro.templateVersions {
		opts = append(opts, gpudra.WithTemplateDriverVersions())
	}
	slices, err := gpudra.SliceTemplates(b, n.inv, opts...)
	if err != nil {
		return err
	}
	objs := make([]runtime.Object, 0, len(slices))
	for _, s := range slices {
		objs = append(objs, s)
	}
	return writeObjects(stdout, ro.output, objs)
}

// writeObjects prints objects as a YAML stream or a JSON v1 List.
func writeObjects(w io.Writer, format string, objs []runtime.Object) error {
	if format == "json" {
		items := make([]runtime.RawExtension, 0, len(objs))
		for _, o := range objs {
			items = append(items, runtime.RawExtension{Object: o})
		}
		list := map[string]any{"apiVersion": "v1", "kind": "List", "items": items}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("encode object %d: %w", i, err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
			return err
		}
	}
	return nil
}
