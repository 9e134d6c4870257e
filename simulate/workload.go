package simulate

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Workload is what one manifest file asks for.
type Workload struct {
	// Claims are the claims the workload's pods would get, in manifest order: claims written
	// as such, then one per template reference per pod replica.
	Claims []*resourceapi.ResourceClaim
	// Classes are DeviceClasses the manifest ships.
	Classes []*resourceapi.DeviceClass
}

// LoadWorkload decodes a multi-document manifest strictly (unknown fields are errors).
// Generated claims are named <template>-<n> in namespace "default" (unless the template has
// one); every claim without a UID gets one from uid, which is called with 1, 2, ... A nil uid
// gives deterministic UIDs (SequentialUID).
func LoadWorkload(data []byte, uid func(n int) types.UID) (*Workload, error) {
	if uid == nil {
		uid = SequentialUID
	}
	w := &Workload{}
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	type pods struct {
		name     string
		spec     corev1.PodSpec
		replicas int
	}
	var users []pods
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		strict := func(into any) error {
			if err := yaml.UnmarshalStrict(doc, into); err != nil {
				return fmt.Errorf("document %d (%s): %w", i, meta.Kind, err)
			}
			return nil
		}
		var derr error
		switch meta.Kind {
		case "":
			continue // comments only
		case "ResourceClaim":
			c := &resourceapi.ResourceClaim{}
			if derr = strict(c); derr == nil {
				w.Claims = append(w.Claims, c)
			}
		case "ResourceClaimTemplate":
			t := &resourceapi.ResourceClaimTemplate{}
			if derr = strict(t); derr == nil {
				templates[t.Name] = t
			}
		case "DeviceClass":
			c := &resourceapi.DeviceClass{}
			if derr = strict(c); derr == nil {
				w.Classes = append(w.Classes, c)
			}
		case "Pod":
			p := &corev1.Pod{}
			if derr = strict(p); derr == nil {
				users = append(users, pods{p.Name, p.Spec, 1})
			}
		case "Deployment":
			d := &appsv1.Deployment{}
			if derr = strict(d); derr == nil {
				users = append(users, pods{d.Name, d.Spec.Template.Spec, int(ptrOr(d.Spec.Replicas, 1))})
			}
		case "Job":
			j := &batchv1.Job{}
			if derr = strict(j); derr == nil {
				users = append(users, pods{j.Name, j.Spec.Template.Spec, int(ptrOr(j.Spec.Parallelism, 1))})
			}
		default:
			return nil, fmt.Errorf("document %d: unsupported kind %q (allowed: ResourceClaim, ResourceClaimTemplate, DeviceClass, Pod, Deployment, Job)", i, meta.Kind)
		}
		if derr != nil {
			return nil, derr
		}
	}
	n := 0
	for _, p := range users {
		for r := 0; r < p.replicas; r++ {
			for _, rc := range p.spec.ResourceClaims {
				if rc.ResourceClaimTemplateName == nil {
					continue
				}
				t, ok := templates[*rc.ResourceClaimTemplateName]
				if !ok {
					return nil, fmt.Errorf("%s: resourceClaims[%s] references template %q, which the manifest does not define", p.name, rc.Name, *rc.ResourceClaimTemplateName)
				}
				n++
				ns := t.Namespace
				if ns == "" {
					ns = "default"
				}
				w.Claims = append(w.Claims, &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", t.Name, n), Namespace: ns, UID: uid(n),
						Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: rc.Name}},
					Spec: *t.Spec.Spec.DeepCopy(),
				})
			}
		}
	}
	for _, c := range w.Claims {
		if c.Namespace == "" {
			c.Namespace = "default"
		}
		if c.UID == "" {
			n++
			c.UID = uid(n)
		}
	}
	return w, nil
}

// SequentialUID returns a valid, deterministic claim UID for n
// ("00000000-0000-4000-8000-000000000001" for 1), for offline tools and tests.
func SequentialUID(n int) types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n))
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}
