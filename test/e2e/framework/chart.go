package framework

import (
	"errors"
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Release names a Helm release: what `helm install NAME CHART -n NAMESPACE` is given.
type Release struct {
	Name, Namespace string
	// Values override the chart's values.yaml, as --values would.
	Values map[string]any
}

// RenderChart renders the chart in dir as `helm template` does for kubeVersion (e.g.
// "v1.37.2") and returns its objects in Helm's install order. It fails when the chart's
// kubeVersion constraint excludes kubeVersion, as `helm install` would.
func RenderChart(dir, kubeVersion string, r Release) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, kubeVersion) {
		return nil, fmt.Errorf("chart %s requires Kubernetes %s, not %s", ch.Name(), c, kubeVersion)
	}
	caps, err := capabilities(kubeVersion)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, r.Values, chartutil.ReleaseOptions{Name: r.Name, Namespace: r.Namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, fmt.Errorf("values for chart %s: %w", ch.Name(), err)
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", ch.Name(), err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, caps.APIVersions, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("sort the manifests of chart %s: %w", ch.Name(), err)
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("chart %s has hooks (%s); the e2e harness does not run hooks", ch.Name(), hooks[0].Path)
	}
	var objs []*unstructured.Unstructured
	for _, m := range manifests {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.Content), &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// LintChart runs what `helm lint --strict --kube-version kubeVersion` runs on the chart in dir
// and fails on any warning or error.
func LintChart(dir, kubeVersion string, r Release) error {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return err
	}
	l := lint.AllWithKubeVersion(dir, r.Values, r.Namespace, kv)
	var errs []error
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, errors.New(m.Error()))
		}
	}
	return errors.Join(errs...)
}

func capabilities(kubeVersion string) (*chartutil.Capabilities, error) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", kubeVersion, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	return caps, nil
}
