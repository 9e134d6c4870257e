package gputest

import (
	"reflect"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var (
	returnType      = reflect.TypeFor[nvml.Return]()
	forwardPrefixes = []struct {
		prefix string
		typ    reflect.Type
	}{
		// Longest prefixes first: "GpuInstance" must not be read as "Gpu…".
		{"ComputeInstance", reflect.TypeFor[nvml.ComputeInstance]()},
		{"GpuInstance", reflect.TypeFor[nvml.GpuInstance]()},
		{"EventSet", reflect.TypeFor[nvml.EventSet]()},
		{"Device", reflect.TypeFor[nvml.Device]()},
	}
)

// fillDefaults sets every nil func field of the mock struct *mockPtr so that the method is
// counted, honours injected faults and answers ERROR_NOT_SUPPORTED (ERROR_GPU_IS_LOST when
// lost reports true) instead of panicking. On the Interface, a method that takes a handle as
// its first argument ("DeviceGetUUID(device)") is forwarded to that handle's method
// ("GetUUID"), as the real library does.
func fillDefaults(m *Machine, mockPtr any, kind string, lost func() bool) {
	v := reflect.ValueOf(mockPtr).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if !f.IsExported() || f.Type.Kind() != reflect.Func || !fv.IsNil() || !strings.HasSuffix(f.Name, "Func") {
			continue
		}
		method := strings.TrimSuffix(f.Name, "Func")
		ft := f.Type
		if kind == "Interface" {
			if fwd := forwarder(m, method, ft); fwd.IsValid() {
				fv.Set(fwd)
				continue
			}
		}
		fv.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			m.mu.Lock()
			ret := m.enter(kind, method)
			if ret == nvml.SUCCESS {
				ret = nvml.ERROR_NOT_SUPPORTED
				if lost != nil && lost() {
					ret = nvml.ERROR_GPU_IS_LOST
				}
			}
			m.mu.Unlock()
			return failed(ft, ret)
		}))
	}
}

// failed returns zero values for every result of ft, with every nvml.Return result set to ret.
func failed(ft reflect.Type, ret nvml.Return) []reflect.Value {
	out := make([]reflect.Value, ft.NumOut())
	for i := range out {
		if ft.Out(i) == returnType {
			out[i] = reflect.ValueOf(ret)
		} else {
			out[i] = reflect.Zero(ft.Out(i))
		}
	}
	return out
}

func forwarder(m *Machine, method string, ft reflect.Type) reflect.Value {
	for _, p := range forwardPrefixes {
		rest, ok := strings.CutPrefix(method, p.prefix)
		if !ok || ft.NumIn() == 0 || ft.In(0) != p.typ {
			continue
		}
		mt, ok := p.typ.MethodByName(rest)
		if !ok || ft.IsVariadic() || mt.Type.NumIn() != ft.NumIn()-1 || mt.Type.NumOut() != ft.NumOut() {
			return reflect.Value{}
		}
		return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			m.mu.Lock()
			ret := m.enter("Interface", method)
			m.mu.Unlock()
			if ret != nvml.SUCCESS {
				return failed(ft, ret)
			}
			if args[0].IsNil() {
				return failed(ft, nvml.ERROR_INVALID_ARGUMENT)
			}
			return args[0].Elem().MethodByName(rest).Call(args[1:])
		})
	}
	return reflect.Value{}
}
