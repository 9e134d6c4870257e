package gputest

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A gate is what every modelled NVML call of a fake object goes through before it does its work:
// the machine's lock, then enter, which counts the call (Calls, WithCallHook), returns an injected
// fault (WithFault, InjectFault) and the object's own failure (a lost GPU, a destroyed instance,
// MIG not supported or not enabled). The guard functions wrap a method's body in a gate, one
// per shape of go-nvml mock func field; a call the gate refuses returns zero values with the
// gate's nvml.Return, and the body is not run.
type gate struct {
	mu    *sync.Mutex
	enter func(method string) nvml.Return
}

// do runs body for method with the lock held when the gate lets the call through, and returns
// the gate's refusal or body's return.
func (g gate) do(method string, body func() nvml.Return) nvml.Return {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ret := g.enter(method); ret != nvml.SUCCESS {
		return ret
	}
	return body()
}

// guardRet guards a method that returns only an nvml.Return: Destroy, Init.
func guardRet(g gate, method string, f func() nvml.Return) func() nvml.Return {
	return func() nvml.Return { return g.do(method, f) }
}

// guardRet1 guards a method of one argument that returns only an nvml.Return: SetComputeMode.
func guardRet1[A any](g gate, method string, f func(A) nvml.Return) func(A) nvml.Return {
	return func(a A) nvml.Return {
		return g.do(method, func() nvml.Return { return f(a) })
	}
}

// guardRet2 guards a method of two arguments that returns only an nvml.Return: RegisterEvents.
func guardRet2[A, B any](g gate, method string, f func(A, B) nvml.Return) func(A, B) nvml.Return {
	return func(a A, b B) nvml.Return {
		return g.do(method, func() nvml.Return { return f(a, b) })
	}
}

// guard guards a method without arguments that returns a value: GetMemoryInfo.
func guard[T any](g gate, method string, f func() (T, nvml.Return)) func() (T, nvml.Return) {
	return func() (v T, ret nvml.Return) {
		ret = g.do(method, func() nvml.Return { v, ret = f(); return ret })
		return v, ret
	}
}

// get guards a method without arguments that cannot fail once through the gate: GetUUID.
func get[T any](g gate, method string, f func() T) func() (T, nvml.Return) {
	return guard(g, method, func() (T, nvml.Return) { return f(), nvml.SUCCESS })
}

// guard1 guards a method of one argument that returns a value: GetGpuInstanceById.
func guard1[A, T any](g gate, method string, f func(A) (T, nvml.Return)) func(A) (T, nvml.Return) {
	return func(a A) (v T, ret nvml.Return) {
		ret = g.do(method, func() nvml.Return { v, ret = f(a); return ret })
		return v, ret
	}
}

// guard2 guards a method of two arguments that returns a value: GetP2PStatus.
func guard2[A, B, T any](g gate, method string, f func(A, B) (T, nvml.Return)) func(A, B) (T, nvml.Return) {
	return func(a A, b B) (v T, ret nvml.Return) {
		ret = g.do(method, func() nvml.Return { v, ret = f(a, b); return ret })
		return v, ret
	}
}

// guardPair guards a method without arguments that returns two values: GetMigMode.
func guardPair[T, U any](g gate, method string, f func() (T, U, nvml.Return)) func() (T, U, nvml.Return) {
	return func() (t T, u U, ret nvml.Return) {
		ret = g.do(method, func() nvml.Return { t, u, ret = f(); return ret })
		return t, u, ret
	}
}
