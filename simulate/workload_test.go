package simulate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/simulate"
)

func uid(n int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }

func TestLoadExpandsTemplatesPerReplica(t *testing.T) {
	manifest := `# a comment-only document
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpu
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x}]
      resourceClaims:
      - name: gpu
        resourceClaimTemplateName: gpu
      - name: shared
        resourceClaimName: shared
`
	w, err := simulate.LoadWorkload([]byte(manifest), uid)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range w.Claims {
		got = append(got, c.Namespace+"/"+c.Name+"="+string(c.UID))
	}
	want := []string{
		"default/shared=" + string(uid(3)),
		"default/gpu-1=" + string(uid(1)),
		"default/gpu-2=" + string(uid(2)),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct{ manifest, want string }{
		{"apiVersion: v1\nkind: Service\nmetadata: {name: x}\n", `unsupported kind "Service"`},
		{"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {devices: {bogus: 1}}\n", `unknown field "spec.devices.bogus"`},
		// Field names are case-sensitive, as the API server reads them.
		{"apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {Devices: {}}\n", `unknown field "spec.Devices"`},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: x}]\n  resourceClaims: [{name: g, resourceClaimTemplateName: missing}]\n", `template "missing"`},
	}
	for _, c := range cases {
		_, err := simulate.LoadWorkload([]byte(c.manifest), uid)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%q) error = %v, want it to mention %s", c.manifest, err, c.want)
		}
	}
}

func TestLoadRecordsPodsAndSkipsOtherKinds(t *testing.T) {
	manifest := `apiVersion: v1
kind: Namespace
metadata: {name: team}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared}
spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one}
spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x}]
      resourceClaims:
      - {name: mine, resourceClaimTemplateName: one}
      - {name: ours, resourceClaimName: shared}
      - {name: theirs, resourceClaimName: elsewhere}
`
	if _, err := simulate.LoadWorkload([]byte(manifest), uid); err == nil || !strings.Contains(err.Error(), `unsupported kind "Namespace"`) {
		t.Fatalf("without SkipOtherKinds: err = %v, want unsupported kind", err)
	}
	w, err := simulate.LoadWorkload([]byte(manifest), uid, simulate.SkipOtherKinds(), simulate.InNamespace("team"))
	if err != nil {
		t.Fatal(err)
	}
	var claims []string
	for _, c := range w.Claims {
		claims = append(claims, c.Namespace+"/"+c.Name)
	}
	// Claims: shared (0), then one per Job pod (1, 2).
	if diff := cmp.Diff([]string{"team/shared", "team/one-1", "team/one-2"}, claims); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	wantPods := []simulate.Pod{
		{Owner: "Job train", Name: "train-0", Claims: []int{1, 0}, MissingClaims: []string{"elsewhere"}},
		{Owner: "Job train", Name: "train-1", Claims: []int{2, 0}, MissingClaims: []string{"elsewhere"}},
	}
	if diff := cmp.Diff(wantPods, w.Pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"document 0: Namespace team"}, w.Skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

// TestLoadStatefulSetsAndProvidedTemplates: a StatefulSet's replicas are pods (before, they
// were skipped as another kind and their claims never allocated), and a template given with
// WithTemplates serves pods that name it unless the manifest defines one of the same name.
func TestLoadStatefulSetsAndProvidedTemplates(t *testing.T) {
	statefulSet := `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: train}
spec:
  replicas: 2
  serviceName: train
  selector: {matchLabels: {app: train}}
  template:
    metadata: {labels: {app: train}}
    spec:
      containers: [{name: c, image: x}]
      resourceClaims: [{name: ch, resourceClaimTemplateName: channel}]
`
	manifestTemplate := `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: channel}
spec: {spec: {devices: {requests: [{name: from-manifest, exactly: {deviceClassName: gpu.nvidia.com}}]}}}
---
`
	provided := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "channel"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "provided", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "c"}}}}}}}
	cases := []struct {
		name, manifest string
		opts           []simulate.LoadOption
		want           []string // claim: request
	}{
		{"provided template", statefulSet, []simulate.LoadOption{simulate.WithTemplates(provided)},
			[]string{"default/channel-1: provided", "default/channel-2: provided"}},
		{"the manifest's template wins", manifestTemplate + statefulSet, []simulate.LoadOption{simulate.WithTemplates(provided)},
			[]string{"default/channel-1: from-manifest", "default/channel-2: from-manifest"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := simulate.LoadWorkload([]byte(tc.manifest), uid, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range w.Claims {
				got = append(got, c.Namespace+"/"+c.Name+": "+c.Spec.Devices.Requests[0].Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("claims (-want +got):\n%s", diff)
			}
			wantPods := []simulate.Pod{{Owner: "StatefulSet train", Name: "train-0", Claims: []int{0}}, {Owner: "StatefulSet train", Name: "train-1", Claims: []int{1}}}
			if diff := cmp.Diff(wantPods, w.Pods); diff != "" {
				t.Errorf("pods (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := simulate.LoadWorkload([]byte(statefulSet), uid); err == nil || !strings.Contains(err.Error(), `template "channel"`) {
		t.Errorf("without the template: err = %v, want one naming the missing template", err)
	}
}
