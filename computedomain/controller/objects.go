package controller

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/computedomain"
	"github.com/gpudra/gpudra/computedomain/objects"
	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// The request names of the claim templates, and the daemon pod's claim.
const (
	// ChannelRequest is the request of a domain's channel claim template.
	ChannelRequest = objects.ChannelRequest
	// DaemonRequest is the request of a domain's daemon claim template, and the name of the
	// daemon pod's claim.
	DaemonRequest = "daemon"
)

// DaemonName is the name of a domain's daemon DaemonSet and daemon claim template in the
// driver's namespace: "computedomain-daemon-<domain UID>".
func DaemonName(uid string) string { return "computedomain-daemon-" + uid }

// domainLabels are the labels of everything the controller makes for the domain with uid.
func domainLabels(uid string) map[string]string { return objects.Labels(uid) }

// channelTemplate is the channel claim template of cd (whose spec.channel is set) in the clique
// of its status.
func channelTemplate(cd *cdv1beta1.ComputeDomain) *resourcev1.ResourceClaimTemplate {
	return objects.ChannelTemplate(cd, cd.Status.CliqueID)
}

// daemonTemplate is the daemon claim template of cd in the driver's namespace.
func daemonTemplate(cd *cdv1beta1.ComputeDomain, namespace string) *resourcev1.ResourceClaimTemplate {
	uid := string(cd.UID)
	meta := metav1.ObjectMeta{Name: DaemonName(uid), Namespace: namespace, Labels: domainLabels(uid)}
	params := cdv1beta1.ComputeDomainDaemonConfig{
		TypeMeta: metav1.TypeMeta{APIVersion: cdv1beta1.GroupVersion().String(), Kind: cdv1beta1.DaemonConfigKind},
		DomainID: uid,
	}
	return objects.ClaimTemplate(meta, DaemonRequest, computedomain.DaemonDeviceClass, cd.Status.CliqueID, params)
}

// daemonSet is the DaemonSet of cd's IMEX daemons in the driver's namespace: the driver's pod
// template on the nodes labelled for cd, each pod with the daemon claim and the domain's
// environment.
func daemonSet(cd *cdv1beta1.ComputeDomain, namespace string, driver *corev1.PodTemplateSpec) *appsv1.DaemonSet {
	uid := string(cd.UID)
	pod := driver.DeepCopy()
	pod.Labels = merged(pod.Labels, domainLabels(uid))
	pod.Spec.NodeSelector = merged(pod.Spec.NodeSelector, domainLabels(uid))
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: DaemonRequest, ResourceClaimTemplateName: ptr.To(DaemonName(uid))}}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		c.Resources.Claims = []corev1.ResourceClaim{{Name: DaemonRequest}}
		c.Env = withEnv(c.Env, domainEnv(cd))
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: DaemonName(uid), Namespace: namespace, Labels: domainLabels(uid)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: domainLabels(uid)},
			Template: *pod,
		},
	}
}

// domainEnv is the environment the controller gives every daemon container.
func domainEnv(cd *cdv1beta1.ComputeDomain) []corev1.EnvVar {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return []corev1.EnvVar{
		{Name: computedomain.EnvDomainUID, Value: string(cd.UID)},
		{Name: computedomain.EnvDomainName, Value: cd.Name},
		{Name: computedomain.EnvDomainNamespace, Value: cd.Namespace},
		{Name: computedomain.EnvNodeName, ValueFrom: field("spec.nodeName")},
		{Name: computedomain.EnvPodIP, ValueFrom: field("status.podIP")},
	}
}

// withEnv is env without the variables add names, followed by add.
func withEnv(env, add []corev1.EnvVar) []corev1.EnvVar {
	names := make(map[string]bool, len(add))
	for _, e := range add {
		names[e.Name] = true
	}
	out := make([]corev1.EnvVar, 0, len(env)+len(add))
	for _, e := range env {
		if !names[e.Name] {
			out = append(out, e)
		}
	}
	return append(out, add...)
}

// merged is a copy of base with add's entries set.
func merged(base, add map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(add))
	maps.Copy(out, base)
	maps.Copy(out, add)
	return out
}
