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

func newRenderCmd() *cobra.Command {
	var nf nodeFlags
	cmd := &cobra.Command{
		Use:   "render",
		Short: "print the DeviceClasses and ResourceSlices the driver publishes (YAML stream)",
		Long: `render prints every DeviceClass the driver ships followed by every ResourceSlice it would publish
for the machine, as complete resource.k8s.io/v1 objects: a multi-document YAML stream that
kubectl apply -f - accepts, or a v1 List with -o json.`,
		Example: `  gpu-dra-driver render --machine l4x8
  gpu-dra-driver render --machine dgx-a100-40gb --mig-config all-balanced
  gpu-dra-driver render --nvml=real -o json`,
		Args: noArgs,
	}
	nf.register(cmd, allNodeFlags...)
	output := outputFlag(cmd, "output format: yaml (multi-document stream) or json (a v1 List)", "yaml", "json")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := oneOf("output", *output, "yaml", "json"); err != nil {
			return err
		}
		return render(cmd.Context(), &nf, *output, cmd.OutOrStdout())
	})
	return cmd
}

func render(ctx context.Context, nf *nodeFlags, output string, stdout io.Writer) error {
	n, err := nf.open(ctx)
	if err != nil {
		return err
	}
	defer n.close()
	b := gpudra.NewBuilder(nf.builderOptions(n)...)
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
	return writeObjects(stdout, output, objs)
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
