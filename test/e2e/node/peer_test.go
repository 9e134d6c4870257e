package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpudra/gpudra/test/e2e/framework"
	"github.com/gpudra/gpudra/test/e2e/framework/kubenode"
)

// The peer: dra-example-driver's kubelet plugin (kubernetes-sigs/dra-example-driver), run
// beside this driver's on the node for side-by-side measurements, built (statically) at the
// version test/e2e/tools/dra-example-driver pins, as the e2e tier's benchmarks build it.
const (
	peerNamespace = "dra-example-driver"
	peerDriver    = "gpu.example.com"
	peerImage     = "gpudra.test/dra-example-kubeletplugin:bench"
)

// installPeer imports the peer's image, installs its kubelet plugin as its Helm chart does
// (ServiceAccount, ClusterRole with the chart's rules, DeviceClass, DaemonSet with the chart's
// environment, privileged, eight "gpu" devices) adapted to the node like this driver's plugin
// (API server through the forwarder, the node's kubelet and CDI directories), and waits until
// its slices are published. The peer stays installed until the suite ends (a benchmark runs
// more than once); later calls do nothing.
func (s *Suite) installPeer(ctx context.Context, tb testing.TB) {
	tb.Helper()
	if s.peerInstalled {
		return
	}
	bin, err := s.Bins.ExampleDriverPath(ctx, os.Stdout, false)
	if err != nil {
		tb.Fatal(err)
	}
	archive := filepath.Join(s.Dir, "peer-image.tar")
	if err := kubenode.WriteArchive(archive, kubenode.StaticImage(peerImage, bin)); err != nil {
		tb.Fatal(err)
	}
	if err := s.Node.Containerd.ImportImages(ctx, archive); err != nil {
		tb.Fatal(err)
	}
	if err := framework.CreateNamespace(ctx, s.Client, peerNamespace, nil); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	if err := s.createPeerObjects(ctx); err != nil {
		tb.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := s.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: resourceapi.ResourceSliceSelectorDriver + "=" + peerDriver})
		return err == nil && len(l.Items) > 0, nil
	})
	if err != nil {
		tb.Fatalf("the peer's plugin published no slices: %v\nevents in %s:\n%s", err, peerNamespace, s.events(ctx, peerNamespace))
	}
	s.peerInstalled = true
}

// createPeerObjects creates the peer's ServiceAccount, ClusterRole (the chart's rules) and
// binding, DeviceClass and DaemonSet.
func (s *Suite) createPeerObjects(ctx context.Context) error {
	c := s.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dra-example-driver", Namespace: peerNamespace}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "dra-example-driver-bench"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, Verbs: []string{"associated-node:update", "associated-node:patch"}, ResourceNames: []string{peerDriver}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "dra-example-driver-bench"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: peerNamespace}},
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: peerDriver}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "device.driver == '" + peerDriver + "'"}}}}}
	opts := metav1.CreateOptions{}
	for _, create := range []func() error{
		func() error { _, err := c.CoreV1().ServiceAccounts(peerNamespace).Create(ctx, sa, opts); return err },
		func() error { _, err := c.RbacV1().ClusterRoles().Create(ctx, role, opts); return err },
		func() error { _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, binding, opts); return err },
		func() error { _, err := c.ResourceV1().DeviceClasses().Create(ctx, class, opts); return err },
		func() error {
			_, err := c.AppsV1().DaemonSets(peerNamespace).Create(ctx, s.peerDaemonSet(sa.Name), opts)
			return err
		},
	} {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// peerDaemonSet is the peer chart's kubelet-plugin DaemonSet with its default values.
func (s *Suite) peerDaemonSet(serviceAccount string) *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": "dra-example-driver", "app.kubernetes.io/component": "kubeletplugin"}
	registry := filepath.Join(s.Node.Kubelet.RootDir, "plugins_registry")
	plugins := filepath.Join(s.Node.Kubelet.RootDir, "plugins")
	env := []corev1.EnvVar{
		{Name: "DRIVER_NAME", Value: peerDriver}, {Name: "DEVICE_PROFILE", Value: "gpu"},
		{Name: "CDI_ROOT", Value: "/var/run/cdi"}, {Name: "KUBELET_REGISTRAR_DIRECTORY_PATH", Value: registry},
		{Name: "KUBELET_PLUGINS_DIRECTORY_PATH", Value: plugins}, {Name: "NUM_DEVICES", Value: "8"},
		{Name: "GPU_PARTITIONS", Value: "0"}, {Name: "BINDING_CONDITIONS", Value: "false"},
		{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		{Name: "POD_UID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}},
	}
	hostPath := func(name, path string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
	}
	spec := corev1.PodSpec{
		ServiceAccountName: serviceAccount,
		Containers: []corev1.Container{{
			Name: "plugin", Image: peerImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}, Env: env,
			VolumeMounts: []corev1.VolumeMount{{Name: "plugins-registry", MountPath: registry}, {Name: "plugins", MountPath: plugins}, {Name: "cdi", MountPath: "/var/run/cdi"}},
		}},
		Volumes: []corev1.Volume{hostPath("plugins-registry", registry), hostPath("plugins", plugins), hostPath("cdi", s.Node.CDIDir)},
	}
	_ = s.adaptToNode(&spec) // only adds the forwarder's address: the peer runs no fake machine
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "dra-example-driver-kubeletplugin", Namespace: peerNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}
