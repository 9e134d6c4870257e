package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/selectors"
)

func runRender(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("render", stderr)
	var nf nodeFlags
	nf.register(fs)
	output := fs.String("o", "yaml", "output format: yaml (multi-document stream) or json (a v1 List)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := oneOf("o", *output, "yaml", "json"); err != nil {
		return err
	}
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
	return writeObjects(stdout, *output, objs)
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
