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

	"github.com/gpudra/gpudra/internal/input"
)

// Workload is what one manifest file asks for.
type Workload struct {
	// Claims are the claims the workload's pods would get, in manifest order: claims written
	// as such, then one per template reference per pod replica.
	Claims []*resourceapi.ResourceClaim
	// Classes are DeviceClasses the manifest ships.
	Classes []*resourceapi.DeviceClass
	// Pods are the pods the workload runs: one per Pod, one per replica of a Deployment or StatefulSet and per
	// parallel pod of a Job, in manifest order.
	Pods []Pod
	// Skipped lists the documents of other kinds ("document 0: Namespace gpu-test1") when
	// LoadWorkload runs with SkipOtherKinds.
	Skipped []string
}

// Pod is one pod of a workload and the claims it uses.
type Pod struct {
	// Owner is the object that makes the pod: "Pod trainer", "Deployment web".
	Owner string
	// Name is the pod's name: the Pod's name, or the owner's name and the replica number
	// ("web-0").
	Name string
	// Claims are indices into Workload.Claims of the claims the pod uses, in the order of its
	// resourceClaims: the claim generated for each template reference, and the ResourceClaims
	// it names that the manifest defines.
	Claims []int
	// MissingClaims are the ResourceClaims the pod names that the manifest does not define.
	MissingClaims []string
}

// LoadOption configures LoadWorkload.
type LoadOption func(*loadOptions)

type loadOptions struct {
	skipOther bool
	namespace string
	provided  []*resourceapi.ResourceClaimTemplate
}

// WithTemplates adds ResourceClaimTemplates that exist in the cluster besides the manifest's,
// such as those a ComputeDomain's controller makes: pods may name them. A template of the
// manifest with the same name replaces one of these.
func WithTemplates(ts ...*resourceapi.ResourceClaimTemplate) LoadOption {
	return func(o *loadOptions) { o.provided = append(o.provided, ts...) }
}

// SkipOtherKinds makes LoadWorkload skip documents of kinds other than ResourceClaim,
// ResourceClaimTemplate, DeviceClass, Pod, Deployment, StatefulSet and Job (a Namespace, a ConfigMap)
// instead of failing; Workload.Skipped lists them.
func SkipOtherKinds() LoadOption { return func(o *loadOptions) { o.skipOther = true } }

// InNamespace puts objects that do not name a namespace into ns (default "default"), as
// kubectl apply -n does.
func InNamespace(ns string) LoadOption { return func(o *loadOptions) { o.namespace = ns } }

// podSource is a Pod, Deployment or Job of the manifest.
type podSource struct {
	kind, name, namespace string
	spec                  corev1.PodSpec
	replicas              int
}

// LoadWorkload decodes a multi-document manifest strictly (unknown fields are errors).
// Generated claims are named <template>-<n> in the template's namespace ("default" unless the
// template names one or InNamespace says otherwise); every claim without a UID gets one from
// uid, which is called with 1, 2, ... A nil uid gives deterministic UIDs (SequentialUID).
func LoadWorkload(data []byte, uid func(n int) types.UID, opts ...LoadOption) (*Workload, error) {
	o := loadOptions{namespace: "default"}
	for _, opt := range opts {
		opt(&o)
	}
	if uid == nil {
		uid = SequentialUID
	}
	w := &Workload{}
	templates := map[string]*resourceapi.ResourceClaimTemplate{}
	for _, t := range o.provided {
		templates[t.Name] = t
	}
	var users []podSource
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		user, err := w.decode(i, doc, templates, o.skipOther)
		if err != nil {
			return nil, err
		}
		if user != nil {
			users = append(users, *user)
		}
	}
	for _, c := range w.Claims {
		if c.Namespace == "" {
			c.Namespace = o.namespace
		}
	}
	n, err := w.expand(users, templates, uid, o.namespace)
	if err != nil {
		return nil, err
	}
	for _, c := range w.Claims {
		if c.UID == "" {
			n++
			c.UID = uid(n)
		}
	}
	return w, nil
}

// decode adds one document to the workload; Pods, Deployments and Jobs are returned for
// expansion.
func (w *Workload) decode(i int, doc []byte, templates map[string]*resourceapi.ResourceClaimTemplate, skipOther bool) (*podSource, error) {
	var meta struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ObjectMeta `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		return nil, fmt.Errorf("document %d: %w", i, err)
	}
	strict := func(into any) error {
		if err := input.UnmarshalStrict(doc, into); err != nil {
			return fmt.Errorf("document %d (%s): %w", i, meta.Kind, err)
		}
		return nil
	}
	switch meta.Kind {
	case "":
		return nil, nil // comments only
	case "ResourceClaim":
		c := &resourceapi.ResourceClaim{}
		err := strict(c)
		w.Claims = append(w.Claims, c)
		return nil, err
	case "ResourceClaimTemplate":
		t := &resourceapi.ResourceClaimTemplate{}
		err := strict(t)
		templates[t.Name] = t
		return nil, err
	case "DeviceClass":
		c := &resourceapi.DeviceClass{}
		err := strict(c)
		w.Classes = append(w.Classes, c)
		return nil, err
	case "Pod":
		p := &corev1.Pod{}
		err := strict(p)
		return &podSource{kind: "Pod", name: p.Name, namespace: p.Namespace, spec: p.Spec, replicas: 1}, err
	case "Deployment":
		d := &appsv1.Deployment{}
		err := strict(d)
		return &podSource{kind: "Deployment", name: d.Name, namespace: d.Namespace, spec: d.Spec.Template.Spec, replicas: int(ptrOr(d.Spec.Replicas, 1))}, err
	case "StatefulSet":
		d := &appsv1.StatefulSet{}
		err := strict(d)
		return &podSource{kind: "StatefulSet", name: d.Name, namespace: d.Namespace, spec: d.Spec.Template.Spec, replicas: int(ptrOr(d.Spec.Replicas, 1))}, err
	case "Job":
		j := &batchv1.Job{}
		err := strict(j)
		return &podSource{kind: "Job", name: j.Name, namespace: j.Namespace, spec: j.Spec.Template.Spec, replicas: int(ptrOr(j.Spec.Parallelism, 1))}, err
	}
	if skipOther {
		w.Skipped = append(w.Skipped, fmt.Sprintf("document %d: %s %s", i, meta.Kind, meta.Metadata.Name))
		return nil, nil
	}
	return nil, fmt.Errorf("document %d: unsupported kind %q (allowed: ResourceClaim, ResourceClaimTemplate, DeviceClass, Pod, Deployment, StatefulSet, Job)", i, meta.Kind)
}

// expand generates the claims of template references, one per pod, and records which claims
// each pod uses. It returns the number of UIDs handed out.
func (w *Workload) expand(users []podSource, templates map[string]*resourceapi.ResourceClaimTemplate, uid func(int) types.UID, defaultNS string) (int, error) {
	named := map[string]int{}
	for i, c := range w.Claims {
		named[c.Namespace+"/"+c.Name] = i
	}
	n := 0
	for _, p := range users {
		ns := p.namespace
		if ns == "" {
			ns = defaultNS
		}
		for r := 0; r < p.replicas; r++ {
			pod := Pod{Owner: p.kind + " " + p.name, Name: p.name}
			if p.kind != "Pod" {
				pod.Name = fmt.Sprintf("%s-%d", p.name, r)
			}
			for _, rc := range p.spec.ResourceClaims {
				if rc.ResourceClaimName != nil {
					if i, ok := named[ns+"/"+*rc.ResourceClaimName]; ok {
						pod.Claims = append(pod.Claims, i)
					} else {
						pod.MissingClaims = append(pod.MissingClaims, *rc.ResourceClaimName)
					}
				}
				if rc.ResourceClaimTemplateName == nil {
					continue
				}
				t, ok := templates[*rc.ResourceClaimTemplateName]
				if !ok {
					return 0, fmt.Errorf("%s: resourceClaims[%s] references template %q, which the manifest does not define", p.name, rc.Name, *rc.ResourceClaimTemplateName)
				}
				n++
				tns := t.Namespace
				if tns == "" {
					tns = defaultNS
				}
				pod.Claims = append(pod.Claims, len(w.Claims))
				w.Claims = append(w.Claims, &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", t.Name, n), Namespace: tns, UID: uid(n),
						Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: rc.Name}},
					Spec: *t.Spec.Spec.DeepCopy(),
				})
			}
			w.Pods = append(w.Pods, pod)
		}
	}
	return n, nil
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
