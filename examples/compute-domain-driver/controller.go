package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gpudra/gpudra/computedomain/controller"
)

// controllerOptions are the flags of the controller command.
type controllerOptions struct {
	kubeconfig, namespace             string
	daemonImage, daemonServiceAccount string
	daemonBinary, driverRoot          string
	// daemonPullSecrets and daemonPullPolicy are the daemon pods' image pull secrets (names
	// of Secrets in --namespace) and pull policy ("" for Kubernetes' default).
	daemonPullSecrets      []string
	daemonPullPolicy       string
	metricsAddr, probeAddr string
	leaderElect            bool
}

func newControllerCmd(work workFunc) *cobra.Command {
	o := &controllerOptions{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "run the ComputeDomain controller until SIGTERM",
		Long: `controller reconciles ComputeDomains (resource.nvidia.com/v1beta1): it chooses an NVLink clique
with room for each domain, makes the channel ResourceClaimTemplate its pods name, and, in
--namespace, the DaemonSet of IMEX daemons (compute-domain-driver daemon, from --daemon-image)
with its daemon claim template; it keeps the domain's status and removes all of it with the
domain.`,
		Args: cobra.NoArgs,
		RunE: work(func(cmd *cobra.Command) error { return o.run(cmd.Context()) }),
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster configuration)")
	f.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the driver's namespace, where the IMEX daemons run (default $POD_NAMESPACE)")
	f.StringVar(&o.daemonImage, "daemon-image", "", "the image of the IMEX daemon pods (this driver's image)")
	f.StringVar(&o.daemonServiceAccount, "daemon-service-account", "", "the IMEX daemon pods' ServiceAccount, in --namespace")
	f.StringSliceVar(&o.daemonPullSecrets, "daemon-image-pull-secrets", nil, "Secrets in --namespace the IMEX daemon pods pull --daemon-image with (comma-separated names; the chart passes its imagePullSecrets)")
	f.StringVar(&o.daemonPullPolicy, "daemon-image-pull-policy", "", "the IMEX daemon pods' image pull policy: Always, IfNotPresent or Never (default: Kubernetes' default for the image's tag)")
	f.StringVar(&o.daemonBinary, "daemon-binary", "/usr/bin/compute-domain-driver", "this program's path in --daemon-image")
	f.StringVar(&o.driverRoot, "driver-root", "/", "the host's NVIDIA driver root (nvidia-imex, nvidia-imex-ctl), mounted into the daemon pods")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", `the metrics endpoint ("0" turns it off)`)
	f.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "the /healthz and /readyz endpoint")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "elect a leader among the controller's replicas (a Lease in --namespace)")
	return cmd
}

func (o *controllerOptions) run(ctx context.Context) error {
	switch {
	case o.namespace == "":
		return usageErrorf("--namespace (or $POD_NAMESPACE) is required")
	case o.daemonImage == "":
		return usageErrorf("--daemon-image is required")
	case o.daemonServiceAccount == "":
		return usageErrorf("--daemon-service-account is required")
	}
	if err := o.validatePull(); err != nil {
		return err
	}
	rc, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := controller.AddToScheme(scheme); err != nil {
		return err
	}
	byObject, err := controller.CacheByObject(o.namespace)
	if err != nil {
		return err
	}
	ctrl.SetLogger(klog.FromContext(ctx))
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Scheme: scheme, Cache: cache.Options{ByObject: byObject},
		Metrics: metricsserver.Options{BindAddress: o.metricsAddr}, HealthProbeBindAddress: o.probeAddr,
		LeaderElection: o.leaderElect, LeaderElectionID: "compute-domain-controller.nvidia.com", LeaderElectionNamespace: o.namespace,
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	r, err := controller.New(mgr.GetClient(),
		controller.WithDriverNamespace(o.namespace),
		controller.WithDaemonPodTemplate(o.daemonPod()),
		controller.WithEventRecorder(mgr.GetEventRecorder(controller.Name)),
		controller.WithUncachedReader(mgr.GetAPIReader()))
	if err != nil {
		return &usageError{err: err}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting the ComputeDomain controller", "namespace", o.namespace, "daemonImage", o.daemonImage)
	return mgr.Start(ctx)
}

// validatePull checks --daemon-image-pull-secrets (Secret names) and --daemon-image-pull-policy.
func (o *controllerOptions) validatePull() error {
	for _, s := range o.daemonPullSecrets {
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return usageErrorf("--daemon-image-pull-secrets: %q is not a Secret name: %s", s, strings.Join(errs, "; "))
		}
	}
	switch corev1.PullPolicy(o.daemonPullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return nil
	}
	return usageErrorf("--daemon-image-pull-policy=%q: want Always, IfNotPresent or Never", o.daemonPullPolicy)
}

// daemonPod is the IMEX daemon pod template the controller completes (node selector, claim,
// environment): this program's daemon command, as root, with the host's driver root.
func (o *controllerOptions) daemonPod() corev1.PodTemplateSpec {
	var secrets []corev1.LocalObjectReference
	for _, s := range o.daemonPullSecrets {
		secrets = append(secrets, corev1.LocalObjectReference{Name: s})
	}
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		ServiceAccountName: o.daemonServiceAccount,
		ImagePullSecrets:   secrets,
		PriorityClassName:  "system-node-critical",
		Tolerations:        []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{
			Name: "imex", Image: o.daemonImage, ImagePullPolicy: corev1.PullPolicy(o.daemonPullPolicy),
			Command:      []string{o.daemonBinary, "daemon", "--driver-root=/driver-root"},
			VolumeMounts: []corev1.VolumeMount{{Name: "driver-root", MountPath: "/driver-root", ReadOnly: true}},
			// Root, not the image's user: the node plugin makes the daemon's directory (its
			// config, nodes file and the fake's state) root-only on the host.
			SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		}},
		Volumes: []corev1.Volume{{Name: "driver-root", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: o.driverRoot, Type: ptr.To(corev1.HostPathDirectory)}}}},
	}}
}
