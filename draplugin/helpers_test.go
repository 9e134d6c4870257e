package draplugin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/draplugin"
	"github.com/gpudra/gpudra/draplugin/draplugintest"
	"github.com/gpudra/gpudra/draplugin/testhooks"
	"github.com/gpudra/gpudra/gpu/gputest"
)

const (
	timeSlicingConfig = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`
	mpsConfig         = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`
)

// env is a draplugintest.Node that fails the test instead of returning errors.
type env struct {
	*draplugintest.Node
	t testing.TB
	n int
}

func newEnv(t testing.TB, machine string, dynamic bool, opts ...gputest.Option) *env {
	t.Helper()
	nopts := []draplugintest.NodeOption{draplugintest.WithMachineOptions(opts...)}
	if dynamic {
		nopts = append(nopts, draplugintest.WithDynamicMIG())
	}
	return newEnvWith(t, machine, nopts...)
}

func newEnvWith(t testing.TB, machine string, nopts ...draplugintest.NodeOption) *env {
	t.Helper()
	n, err := draplugintest.NewNode(machine, nopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return &env{Node: n, t: t}
}

// ctx is a context carrying the test's logger when the test runs verbosely.
func (e *env) ctx() context.Context {
	if tt, ok := e.t.(*testing.T); ok && testing.Verbose() {
		return klog.NewContext(context.Background(), ktesting.NewLogger(tt, ktesting.NewConfig(ktesting.Verbosity(2))))
	}
	return context.Background()
}

// plugin starts a plugin "process" on the env.
func (e *env) plugin(mutate ...func(*draplugin.Config)) *draplugin.Plugin {
	e.t.Helper()
	p, err := e.NewPlugin(e.ctx(), mutate...)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func withHooks(h testhooks.Hooks) func(*draplugin.Config) {
	return func(c *draplugin.Config) { c.TestHooks = h }
}

func withMetrics(reg prometheus.Registerer) func(*draplugin.Config) {
	return func(c *draplugin.Config) { c.Metrics = reg }
}

func withHealth(h draplugin.HealthConfig) func(*draplugin.Config) {
	return func(c *draplugin.Config) { c.Health = h }
}

// claim allocates a new claim for one device of class with an optional selector and config.
func (e *env) claim(class, selector, config string) *resourceapi.ResourceClaim {
	e.t.Helper()
	e.n++
	c, err := e.Allocate(context.Background(), draplugintest.Claim(fmt.Sprintf("claim-%d", e.n), class, selector, config))
	if err != nil {
		e.t.Fatalf("allocate claim-%d: %v", e.n, err)
	}
	return c
}

func (e *env) reconcile(p *draplugin.Plugin) *draplugin.ReconcileReport {
	e.t.Helper()
	rep, err := p.Reconcile(e.ctx())
	if err != nil {
		e.t.Fatalf("Reconcile: %v (%v)", err, rep)
	}
	return rep
}

func (e *env) specs() []string {
	e.t.Helper()
	s, err := e.Specs()
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func gpuIndex(i int) string { return fmt.Sprintf("device.attributes['gpu.nvidia.com'].index == %d", i) }

func migProfileOn(profile string, i int) string {
	return fmt.Sprintf("device.attributes['gpu.nvidia.com'].profile == '%s' && device.attributes['gpu.nvidia.com'].parentIndex == %d", profile, i)
}

func prepareOne(t testing.TB, p *draplugin.Plugin, c *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	t.Helper()
	return draplugintest.Prepare(context.Background(), p, c)
}

func unprepareOne(t testing.TB, p *draplugin.Plugin, c *resourceapi.ResourceClaim) error {
	t.Helper()
	return draplugintest.Unprepare(context.Background(), p, c)
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
