package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

// TestComputeDomainCRD (issue 31): the generated ComputeDomain CRD (deployments/crds), applied
// to the real API server, takes NVIDIA's manifest shape unchanged and defaults its
// allocationMode to Single; the API server refuses an allocation mode other than Single and All
// and a negative numNodes, naming the field.
func TestComputeDomainCRD(t *testing.T) {
	ctx := context.Background()
	if err := applyComputeDomainAPI(ctx); err != nil {
		t.Fatal(err)
	}
	ns := shortName("cd", "crd")
	if err := framework.CreateNamespace(ctx, suite.Client, ns, nil); err != nil {
		t.Fatal(err)
	}
	domain := func(name, extra string) *unstructured.Unstructured {
		objs, err := framework.DecodeObjects([]byte(`
apiVersion: resource.nvidia.com/v1beta1
kind: ComputeDomain
metadata:
  name: ` + name + `
spec:
  numNodes: 4
  channel:
    resourceClaimTemplate:
      name: ` + name + `-channel
` + extra))
		if err != nil || len(objs) != 1 {
			t.Fatalf("manifest: %v", err)
		}
		return objs[0]
	}
	// The CRD takes a moment to be served after it is Established.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return suite.Applier.Apply(ctx, ns, domain("training", "")) == nil, nil
	})
	if err != nil {
		t.Fatalf("create a ComputeDomain: %v", suite.Applier.Apply(ctx, ns, domain("training", "")))
	}
	created, err := suite.Applier.Get(ctx, ns, domain("training", ""))
	if err != nil {
		t.Fatal(err)
	}
	if mode, _, _ := unstructured.NestedString(created.Object, "spec", "channel", "allocationMode"); mode != "Single" {
		t.Errorf("allocationMode defaulted to %q, want Single", mode)
	}
	for _, bad := range []struct{ name, extra, field string }{
		{"bad-mode", "    allocationMode: Some\n", "spec.channel.allocationMode"},
		{"bad-nodes", "", "spec.numNodes"},
	} {
		obj := domain(bad.name, bad.extra)
		if bad.name == "bad-nodes" {
			_ = unstructured.SetNestedField(obj.Object, int64(-1), "spec", "numNodes")
		}
		err := suite.Applier.Apply(ctx, ns, obj)
		if err == nil || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("ComputeDomain %s: %v; want refused naming %s", bad.name, err, bad.field)
		}
	}
}

// The ComputeDomain API's manifests: the generated CRD and the driver's DeviceClasses.
var computeDomainManifests = []string{
	"deployments/crds/resource.nvidia.com_computedomains.yaml",
	"examples/deploy/computedomain/deviceclasses.yaml",
}

// applyComputeDomainAPI applies the ComputeDomain CRD and the driver's DeviceClasses (server-side
// apply, so every test that needs them may call it, in any order).
func applyComputeDomainAPI(ctx context.Context) error {
	for _, path := range computeDomainManifests {
		data, err := os.ReadFile(filepath.Join(suite.Repo, path))
		if err != nil {
			return err
		}
		objs, err := framework.DecodeObjects(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := suite.Applier.Apply(ctx, "", objs...); err != nil {
			return fmt.Errorf("apply %s: %w", path, err)
		}
	}
	return nil
}
