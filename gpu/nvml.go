package gpu

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DefaultLibraryPath is the NVML library OpenReal loads unless WithLibraryPath says otherwise. A
// bare file name is resolved by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache).
const DefaultLibraryPath = "libnvidia-ml.so.1"

// ErrNVMLNotFound is returned (wrapped) by OpenReal when the NVML library cannot be loaded.
var ErrNVMLNotFound = errors.New("NVML library not found")

// Session is an initialized NVML library. Open or OpenReal calls Init; Close calls Shutdown.
// Enumerate may be called any number of times between the two. A Session is safe for
// concurrent use.
type Session struct {
	lib    nvml.Interface
	mu     sync.Mutex
	closed bool
}

// Open initializes lib (nvml.Interface.Init) and returns a Session that owns that
// initialization. lib may be a real library from nvml.New or a gpu/gputest machine.
func Open(lib nvml.Interface) (*Session, error) {
	if lib == nil {
		return nil, errors.New("gpu: Open: nil nvml.Interface")
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: NVML Init: %w", nvmlError(ret))
	}
	return &Session{lib: lib}, nil
}

// RealOption configures OpenReal.
type RealOption func(*realConfig)

type realConfig struct {
	path string
}

// WithLibraryPath loads NVML from path instead of DefaultLibraryPath (for example a driver
// root mounted into a container: "/driver-root/usr/lib64/libnvidia-ml.so.1").
func WithLibraryPath(path string) RealOption {
	return func(c *realConfig) { c.path = path }
}

// OpenReal loads the host's NVML library and initializes it. Without the library (no NVIDIA
// driver, or the wrong path) it returns an error wrapping ErrNVMLNotFound that names the path;
// it never panics.
func OpenReal(opts ...RealOption) (*Session, error) {
	c := realConfig{path: DefaultLibraryPath}
	for _, o := range opts {
		o(&c)
	}
	if c.path == "" {
		return nil, errors.New("gpu: OpenReal: empty NVML library path")
	}
	if c.path[0] == '/' {
		if _, err := os.Stat(c.path); err != nil {
			return nil, fmt.Errorf("gpu: cannot load %s (is the NVIDIA driver installed?): %w: %w", c.path, ErrNVMLNotFound, err)
		}
	}
	lib := nvml.New(nvml.WithLibraryPath(c.path))
	ret := lib.Init()
	switch ret {
	case nvml.SUCCESS:
		return &Session{lib: lib}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("gpu: cannot load %s (is the NVIDIA driver installed and the library on the loader path?): %w", c.path, ErrNVMLNotFound)
	default:
		return nil, fmt.Errorf("gpu: NVML Init with %s: %w", c.path, nvmlError(ret))
	}
}

// Interface returns the initialized NVML library, for calls this package does not wrap.
func (s *Session) Interface() nvml.Interface { return s.lib }

// Close shuts NVML down. Calling it again does nothing.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("gpu: NVML Shutdown: %w", nvmlError(ret))
	}
	return nil
}

// nvmlError turns an NVML return code into an error that errors.Is matches against the
// nvml.Return value itself.
func nvmlError(ret nvml.Return) error { return ret }
