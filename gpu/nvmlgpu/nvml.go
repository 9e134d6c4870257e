package nvmlgpu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/internal/driverroot"
)

// DefaultLibraryPath is the NVML library OpenReal loads unless WithLibraryPath or
// WithDriverRoot says otherwise. A bare file name is resolved by the dynamic loader
// (LD_LIBRARY_PATH, ld.so.cache). It is also the file name FindLibrary looks for.
const DefaultLibraryPath = "libnvidia-ml.so.1"

// FindLibrary returns the absolute path of NVML (DefaultLibraryPath) in the driver root
// driverRoot, as this process opens it: the first of the root's library directories
// (LibrarySearchDirs) that holds it, with every symbolic link resolved inside the root (an
// absolute link target such as "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05" is
// relative to the driver root, not to this process's "/"). An empty driverRoot is "/".
//
// Loading NVML by this path, rather than pointing LD_LIBRARY_PATH at the driver root, keeps the
// driver root's other libraries, its C library above all, out of this process: a process whose
// dynamic loader finds another glibc's libc.so.6 exits 127 before main. When the library is in
// none of the directories, the error wraps ErrNVMLNotFound and names the root and the
// directories searched.
func FindLibrary(driverRoot string) (string, error) {
	if driverRoot == "" {
		driverRoot = "/"
	}
	dirs := LibrarySearchDirs()
	names := make([]string, len(dirs))
	for i, d := range dirs {
		names[i] = filepath.Join(d, DefaultLibraryPath)
	}
	p, err := driverroot.Find(driverRoot, names)
	if err != nil { // err names every file looked at; the directories say it shorter
		searched := make([]string, len(dirs))
		for i, d := range dirs {
			searched[i] = filepath.Join(driverRoot, d)
		}
		return "", fmt.Errorf("gpu: %s not found in driver root %s (searched %s): %w",
			DefaultLibraryPath, driverRoot, strings.Join(searched, ", "), ErrNVMLNotFound)
	}
	return p, nil
}

// LibrarySearchDirs returns the directories, relative to a driver root, that FindLibrary
// searches, in order: usr/lib64, usr/lib/x86_64-linux-gnu, usr/lib/aarch64-linux-gnu, lib64,
// lib/x86_64-linux-gnu, lib/aarch64-linux-gnu, usr/lib, lib.
func LibrarySearchDirs() []string { return driverroot.LibraryDirs() }

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
	path       string
	pathSet    bool
	driverRoot string
}

// WithLibraryPath loads NVML from path instead of DefaultLibraryPath (for example a driver
// root mounted into a container: "/driver-root/usr/lib64/libnvidia-ml.so.1"). It takes
// precedence over WithDriverRoot.
func WithLibraryPath(path string) RealOption {
	return func(c *realConfig) { c.path, c.pathSet = path, true }
}

// WithDriverRoot loads NVML by its absolute path in the driver root root (FindLibrary): "/" for
// a driver installed on the host, the host's driver root as mounted into this process's
// container otherwise ("/driver-root"). For a root other than "/" a library FindLibrary cannot
// find is an error; for "/" OpenReal then falls back to DefaultLibraryPath, the dynamic
// loader's search. Nothing is added to LD_LIBRARY_PATH.
func WithDriverRoot(root string) RealOption {
	return func(c *realConfig) {
		if root == "" {
			root = "/"
		}
		c.driverRoot = root
	}
}

// OpenReal loads the host's NVML library and initializes it. Without the library (no NVIDIA
// driver, or the wrong path) it returns an error wrapping ErrNVMLNotFound that names the path;
// it never panics.
func OpenReal(opts ...RealOption) (*Session, error) {
	var c realConfig
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.pathSet:
		if c.path == "" {
			return nil, errors.New("gpu: OpenReal: empty NVML library path")
		}
	case c.driverRoot == "":
		c.path = DefaultLibraryPath
	default:
		p, err := FindLibrary(c.driverRoot)
		switch {
		case err == nil:
			c.path = p
		case driverroot.IsHostRoot(c.driverRoot):
			c.path = DefaultLibraryPath // a host install: the loader may know more places
		default:
			return nil, err
		}
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
