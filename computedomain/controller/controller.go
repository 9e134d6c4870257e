package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crrecorder "sigs.k8s.io/controller-runtime/pkg/recorder"

	cdv1beta1 "github.com/gpudra/gpudra/computedomain/v1beta1"
)

// Name is the controller's name: its event recorder's reporting controller and the name its
// manager logs and counts it under.
const Name = "computedomain-controller"

// Finalizer keeps a ComputeDomain until the controller has removed what it made for it in the
// driver's namespace and on the nodes (cross-namespace owner references are not allowed).
const Finalizer = "resource.nvidia.com/computedomain-cleanup"

// ConflictRetry is how long a domain waits before the next reconcile when a write of the last
// one lost to a concurrent write (HTTP 409).
const ConflictRetry = time.Second

// DefaultNoCliqueRetry is how long a domain that no clique has room for waits before the
// controller tries again, besides the ResourceSlice and Node changes that wake it.
const DefaultNoCliqueRetry = 30 * time.Second

// EventRecorder is what the controller needs of an event recorder (events.k8s.io/v1 style):
// the manager's GetEventRecorder, or events.NewFakeRecorder in tests.
type EventRecorder interface {
	// Eventf records an event of eventtype about regarding, with reason, action and a note
	// formatted from args.
	Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

var (
	_ EventRecorder        = events.EventRecorder(nil)
	_ EventRecorder        = crrecorder.EventRecorder(nil)
	_ reconcile.Reconciler = (*Reconciler)(nil)
)

// Reconciler is the ComputeDomain controller: it reconciles one domain per Reconcile call.
// Make it with New and register it with SetupWithManager.
type Reconciler struct {
	pins          pins
	client        client.Client
	reader        client.Reader
	recorder      EventRecorder
	namespace     string
	podTemplate   corev1.PodTemplateSpec
	hasTemplate   bool
	noCliqueRetry time.Duration
}

// Option configures a Reconciler.
type Option func(*Reconciler)

// WithDriverNamespace sets the namespace of the driver, where the controller makes each
// domain's daemon ResourceClaimTemplate and DaemonSet. Required.
func WithDriverNamespace(namespace string) Option {
	return func(r *Reconciler) { r.namespace = namespace }
}

// WithDaemonPodTemplate sets the driver's part of the IMEX daemon pod: image, command, service
// account, tolerations and the like. The controller adds the domain's node selector, label,
// daemon claim and environment to a copy for each domain. Required. Write out the numbers the
// API server would default (a probe's thresholds, a host network's host ports): the controller
// puts back every field it sets, and a zero it sets differs from the default, so it would
// write the DaemonSet again on each reconcile (a write that changes nothing).
func WithDaemonPodTemplate(t corev1.PodTemplateSpec) Option {
	return func(r *Reconciler) {
		r.podTemplate = *t.DeepCopy()
		r.hasTemplate = true
	}
}

// WithEventRecorder sets where the controller reports events on domains (reason NoClique when
// no clique has room). The default drops them; SetupWithManager callers pass
// mgr.GetEventRecorder(Name).
func WithEventRecorder(rec EventRecorder) Option {
	return func(r *Reconciler) { r.recorder = rec }
}

// WithUncachedReader sets a reader that asks the API server, not the manager's cache
// (mgr.GetAPIReader()). The cache SetupWithManager callers configure with CacheByObject holds
// only the DaemonSets and claim templates that carry NodeLabel; one whose label someone removed
// is read through this reader to be put back. Default: the client New was given.
func WithUncachedReader(rd client.Reader) Option {
	return func(r *Reconciler) { r.reader = rd }
}

// WithNoCliqueRetry sets how long a domain that no clique has room for waits before the next
// try (DefaultNoCliqueRetry).
func WithNoCliqueRetry(d time.Duration) Option {
	return func(r *Reconciler) { r.noCliqueRetry = d }
}

// New returns the controller for the ComputeDomains c reads and writes. c must know the
// ComputeDomain types (AddToScheme).
func New(c client.Client, opts ...Option) (*Reconciler, error) {
	r := &Reconciler{recorder: discardRecorder{}, noCliqueRetry: DefaultNoCliqueRetry}
	if c != nil {
		// The fields the controller writes are managed by Name (status: cliqueID, status,
		// the nodes' indexes), beside the nodes' imex-daemon/<node> managers.
		r.client = client.WithFieldOwner(c, Name)
		r.reader = c
	}
	for _, o := range opts {
		o(r)
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("computedomain controller: %w", err)
	}
	return r, nil
}

// validate checks the options New was given.
func (r *Reconciler) validate() error {
	if r.client == nil {
		return errors.New("no API client")
	}
	if r.reader == nil {
		return errors.New("no uncached reader (WithUncachedReader(nil))")
	}
	if errs := validation.IsDNS1123Label(r.namespace); len(errs) > 0 {
		return fmt.Errorf("driver namespace %q (WithDriverNamespace) is not a namespace name: %v", r.namespace, errs)
	}
	if !r.hasTemplate || len(r.podTemplate.Spec.Containers) == 0 {
		return errors.New("the daemon pod template (WithDaemonPodTemplate) has no container: it must name the IMEX daemon's image and command")
	}
	if len(r.podTemplate.Spec.ResourceClaims) > 0 {
		return fmt.Errorf("the daemon pod template (WithDaemonPodTemplate) has spec.resourceClaims %q: the controller sets them (the daemon claim) and allows no others", r.podTemplate.Spec.ResourceClaims[0].Name)
	}
	if r.noCliqueRetry <= 0 {
		return fmt.Errorf("the no-clique retry (WithNoCliqueRetry) is %v: it must be positive", r.noCliqueRetry)
	}
	return nil
}

// Reconcile brings one ComputeDomain and what the controller makes for it to the contract
// (package computedomain): the finalizer, the clique, the claim templates, the DaemonSet and
// the status; or, for a domain being deleted, removes them and then the finalizer.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := klog.FromContext(ctx).WithValues("computeDomain", req.NamespacedName)
	ctx = klog.NewContext(ctx, logger)
	cd := &cdv1beta1.ComputeDomain{}
	if err := r.client.Get(ctx, req.NamespacedName, cd); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get ComputeDomain %s: %w", req.NamespacedName, err)
	}
	res, err := r.reconcileDomain(ctx, cd)
	if isConcurrentWrite(err) {
		klog.FromContext(ctx).V(2).Info("A concurrent write got there first; trying again", "err", err, "after", ConflictRetry)
		return reconcile.Result{RequeueAfter: ConflictRetry}, nil
	}
	return res, err
}

// reconcileDomain runs the steps of Reconcile on cd.
func (r *Reconciler) reconcileDomain(ctx context.Context, cd *cdv1beta1.ComputeDomain) (reconcile.Result, error) {
	if !cd.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.cleanup(ctx, cd)
	}
	if err := r.addFinalizer(ctx, cd); err != nil {
		return reconcile.Result{}, err
	}
	chosen, err := r.ensureClique(ctx, cd)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !chosen {
		return reconcile.Result{RequeueAfter: r.noCliqueRetry}, nil
	}
	if err := r.ensureObjects(ctx, cd); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.labelNodes(ctx, cd); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.updateStatus(ctx, cd)
}

// isConcurrentWrite says whether err is a conflict with a concurrent write (a daemon's status,
// a kubelet's update of a Node, an object created meanwhile): no error worth a log line with a
// stack, but one to try again after ConflictRetry. The write's own watch event does not always
// come: the Node watch passes label changes only, and a kubelet's status update is none.
func isConcurrentWrite(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}

// ensureObjects makes (or puts back) the channel template, the daemon template and the
// DaemonSet of cd, whose clique is chosen.
func (r *Reconciler) ensureObjects(ctx context.Context, cd *cdv1beta1.ComputeDomain) error {
	if cd.Spec.Channel != nil {
		if err := r.ensureTemplate(ctx, cd, channelTemplate(cd)); err != nil {
			return err
		}
	}
	if err := r.ensureTemplate(ctx, cd, daemonTemplate(cd, r.namespace)); err != nil {
		return err
	}
	return r.ensureDaemonSet(ctx, cd, daemonSet(cd, r.namespace, &r.podTemplate))
}

// discardRecorder drops events: the recorder of a controller given none.
type discardRecorder struct{}

// Eventf drops the event.
func (discardRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
}
