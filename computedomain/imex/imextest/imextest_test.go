package imextest_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpudra/gpudra/computedomain/imex"
	"github.com/gpudra/gpudra/computedomain/imex/imextest"
	"github.com/gpudra/gpudra/internal/driverroot"
)

// TestClientMergesNodesLikeTheCRD: the fake client's apply schema keys status.nodes by the
// CRD's list-map keys; the CRD is the authority, so a change there must show here.
func TestClientMergesNodesLikeTheCRD(t *testing.T) {
	b, err := os.ReadFile("../../../deployments/crds/resource.nvidia.com_computedomains.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								ListType string   `json:"x-kubernetes-list-type"`
								MapKeys  []string `json:"x-kubernetes-list-map-keys"`
							}
						}
					} `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD versions: %d, want 1", len(crd.Spec.Versions))
	}
	nodes := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["nodes"]
	if nodes.ListType != "map" || !slices.Equal(nodes.MapKeys, []string{"name"}) {
		t.Errorf("CRD status.nodes: list type %q keys %v; the fake client merges a map keyed by name", nodes.ListType, nodes.MapKeys)
	}
}

// TestFakeCtl: nvidia-imex-ctl -q answers READY only while the recorded nvidia-imex is alive
// and ready.
func TestFakeCtl(t *testing.T) {
	root := imextest.NewDriverRoot(t)
	dir := t.TempDir()
	self := netip.MustParseAddr("10.0.0.1")
	c := imex.IMEXConfig{Dir: dir, BindIP: self}
	w := imex.NewWriter()
	if err := w.WriteConfig(c); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteNodes(c, []netip.Addr{self}); err != nil {
		t.Fatal(err)
	}
	ctl := func() (string, error) {
		cmd, err := driverroot.Command(context.Background(), root, driverroot.FindBinary(root, "nvidia-imex-ctl"), nil, "-q", "-c", c.ConfigPath())
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := ctl(); err == nil || !strings.Contains(out, "not running") {
		t.Errorf("before any start: %q, %v; want an error saying it is not running", out, err)
	}
	if err := imextest.WriteFaults(dir, imextest.Faults{ReadyAfter: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cmd, err := driverroot.Command(context.Background(), root, driverroot.FindBinary(root, "nvidia-imex"), nil, "-c", c.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitReady := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := ctl()
			if err == nil && out == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("nvidia-imex-ctl -q = %q, %v; want %q", out, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitReady("UNAVAILABLE")
	waitReady("READY")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if out, err := ctl(); err == nil {
		t.Errorf("after SIGKILL: %q, want an error (the state still says ready, the process is gone)", out)
	}
	if _, err := os.Stat(filepath.Join(dir, imex.LogFile)); err != nil {
		t.Errorf("the fake wrote no log: %v", err)
	}
}
