package gputest

import (
	"reflect"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NotSupported makes an NVML built from go-nvml's mock types (pkg/nvml/mock: its DGX servers in
// mock/dgxa100, mock/dgxh100, mock/dgxh200, mock/dgxb200, or a mock/server.Server of mock/gpus
// configurations) answer ERROR_NOT_SUPPORTED, with zero values, for every method the mock does
// not implement, as the real library does for a call the GPU or driver lacks; the mocks
// themselves panic on such a call (a nil XxxFunc field). It patches lib in place and returns it:
// the mock structs reachable from it (embedded mocks, devices in its fields) at once, and the
// handles its methods return later (devices, GPU and compute instances, event sets) as they are
// returned. Methods the mock implements are left as NVIDIA wrote them. Patch before use: the
// patched fields are not safe to change while another goroutine calls lib.
func NotSupported(lib nvml.Interface) nvml.Interface {
	p := &notSupported{seen: map[uintptr]bool{}}
	p.patch(reflect.ValueOf(lib))
	return lib
}

// notSupported patches mock structs, each once.
type notSupported struct {
	mu   sync.Mutex
	seen map[uintptr]bool
}

// patch patches every mock struct v holds: a pointer to a struct, an interface holding one, or a
// slice of them.
func (p *notSupported) patch(v reflect.Value) {
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			p.patch(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			p.patch(v.Index(i))
		}
	case reflect.Pointer:
		if v.IsNil() || v.Elem().Kind() != reflect.Struct {
			return
		}
		p.mu.Lock()
		done := p.seen[v.Pointer()]
		p.seen[v.Pointer()] = true
		p.mu.Unlock()
		if !done {
			p.fields(v.Elem())
		}
	}
}

// fields patches the func fields of struct s, its embedded structs and the handles in its
// exported fields.
func (p *notSupported) fields(s reflect.Value) {
	t := s.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), s.Field(i)
		switch {
		case !f.IsExported():
		case f.Anonymous && f.Type.Kind() == reflect.Struct:
			p.fields(fv)
		case f.Type.Kind() == reflect.Func && strings.HasSuffix(f.Name, "Func"):
			p.funcField(fv)
		case f.Type.Kind() == reflect.Slice || f.Type.Kind() == reflect.Interface:
			p.patch(fv)
		}
	}
}

// funcField makes a nil func answer ERROR_NOT_SUPPORTED, and a set one patch what it returns.
func (p *notSupported) funcField(fv reflect.Value) {
	ft := fv.Type()
	if fv.IsNil() {
		fv.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value { return failed(ft, nvml.ERROR_NOT_SUPPORTED) }))
		return
	}
	orig := fv.Interface()
	fv.Set(reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		var out []reflect.Value
		if ft.IsVariadic() {
			out = reflect.ValueOf(orig).CallSlice(args)
		} else {
			out = reflect.ValueOf(orig).Call(args)
		}
		for _, o := range out {
			p.patch(o)
		}
		return out
	}))
}
