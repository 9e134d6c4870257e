// Package chart tests the Helm chart's rendering and values schema with Helm's Go packages
// only: no control plane, so they run in `make e2e`'s first step, before the cluster tier
// (test/e2e's TestMain starts a control plane for every test of that package).
package chart

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpudra/gpudra/test/e2e/framework"
)

const (
	chartDir = "../../../deployments/helm/gpu-dra-driver"
	// kubeVersion is the version the e2e tier runs (binaries.Resolve pins k8s.io/kubernetes).
	kubeVersion = "v1.37.2"
	// oldKubeVersion has no granular claim-status authorization.
	oldKubeVersion = "v1.35.3"
	driverName     = "gpu.nvidia.com"
)

func release(vals map[string]any) framework.Release {
	return framework.Release{Name: "gpu-dra-driver", Namespace: "gpu-dra-driver", Values: vals}
}

func render(t *testing.T, kube string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := framework.RenderChart(chartDir, kube, release(vals))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
