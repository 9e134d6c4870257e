package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
)

// nodeSpecific removes from a node's published slices what a template may not know, written
// from the list of node-specific fields (names, hardware identities, node software, health)
// rather than from the template code.
func nodeSpecific(slices []resourceapi.ResourceSlice, node, template string, keepVersions bool) []resourceapi.ResourceSlice {
	drop := []resourceapi.QualifiedName{"uuid", "parentUUID", "resource.kubernetes.io/pciBusID"}
	if !keepVersions {
		drop = append(drop, "driverVersion", "cudaDriverVersion")
	}
	for i := range slices {
		s := &slices[i]
		s.Name = strings.Replace(s.Name, node, template, 1)
		s.Spec.NodeName = &template
		s.Spec.Pool.Name = template
		for j := range s.Spec.Devices {
			for _, a := range drop {
				delete(s.Spec.Devices[j].Attributes, a)
			}
			s.Spec.Devices[j].Taints = nil
		}
	}
	return slices
}

// TestRenderTemplate: `render --template` prints, for each machine and set of flags, what
// `render` prints for a real node of that machine with the same flags, apart from node-specific
// fields, and no DeviceClasses (they are not per node).
func TestRenderTemplate(t *testing.T) {
	cases := []struct {
		name     string
		flags    []string
		node     string // --node-name given with --template; "" for the default
		versions bool
	}{
		{name: "full GPUs", flags: []string{"--machine", "l4x8"}},
		{name: "static MIG", flags: []string{"--machine", "dgx-a100-40gb", "--mig-config", "all-balanced"}},
		{name: "dynamic MIG", flags: []string{"--machine", "dgx-h100", "--dynamic-mig"}},
		{name: "consumable memory, named template node", flags: []string{"--machine", "l4x8", "--consumable-memory"}, node: "karpenter-l4"},
		{name: "driver versions kept", flags: []string{"--machine", "l4x8"}, versions: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, append([]string{"render", "--node-name", "gpu-node-17"}, tc.flags...)...)
			if code != 0 {
				t.Fatalf("render: exit %d: %s", code, errOut)
			}
			args := append([]string{"render", "--template"}, tc.flags...)
			template := "template-node"
			if tc.node != "" {
				args, template = append(args, "--node-name", tc.node), tc.node
			}
			if tc.versions {
				args = append(args, "--template-driver-versions")
			}
			code, tmpl, errOut := runCLI(t, args...)
			if code != 0 {
				t.Fatalf("render --template: exit %d: %s", code, errOut)
			}
			if strings.Contains(tmpl, "kind: DeviceClass") {
				t.Error("render --template printed DeviceClasses")
			}
			want := nodeSpecific(renderedSlices(t, out), "gpu-node-17", template, tc.versions)
			got := renderedSlices(t, tmpl)
			if len(got) == 0 {
				t.Fatal("render --template printed no ResourceSlice")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("templates differ from the node's slices beyond node-specific fields (-want +got):\n%s", diff)
			}
			if strings.Contains(tmpl, "gpu-node-17") || strings.Contains(tmpl, "GPU-") {
				t.Error("render --template printed a node name or a GPU UUID")
			}
		})
	}
	if code, _, errOut := runCLI(t, "render", "--template-driver-versions"); code != 2 || !strings.Contains(errOut, "--template") {
		t.Errorf("render --template-driver-versions without --template: exit %d (want 2), %q", code, errOut)
	}
}
