package driverroot

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symbolic links Resolve follows for one path, as the kernel's MAXSYMLINKS
// bounds them for a path lookup.
const maxLinks = 40

// Resolve returns the path this process opens for p inside root, with every symbolic link on
// the way resolved as a process whose "/" is root would resolve it: an absolute link target
// starts again at root, and ".." never climbs above root. p is read relative to root whether
// or not it starts with "/". The result lies below root (or is root) and names the file
// itself, not a link to it. A missing file gives an error wrapping fs.ErrNotExist; a link loop
// one wrapping syscall.ELOOP.
func Resolve(root, p string) (string, error) {
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	resolved := "/" // the part resolved so far, as a path inside root
	rest := p
	links := 0
	for rest != "" {
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		switch name {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved) // path.Dir("/") is "/": ".." stops at root
			continue
		}
		next := path.Join(resolved, name)
		host := filepath.Join(root, next)
		st, err := os.Lstat(host)
		if err != nil {
			return "", fmt.Errorf("%s in driver root %s: %w", p, root, err)
		}
		if st.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%s in driver root %s: more than %d symbolic links: %w", p, root, maxLinks, syscall.ELOOP)
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", fmt.Errorf("%s in driver root %s: %w", p, root, err)
		}
		if strings.HasPrefix(target, "/") {
			resolved = "/"
		}
		if rest == "" {
			rest = target
		} else {
			rest = target + "/" + rest
		}
	}
	return filepath.Join(root, resolved), nil
}

// IsHostRoot reports whether root is this process's own "/" (an empty root counts as "/").
func IsHostRoot(root string) bool { return root == "" || filepath.Clean(root) == "/" }

// LibraryDirs are the directories, relative to a driver root, that hold the driver's libraries
// and the C library, in search order: Red Hat and SUSE (lib64), Debian and Ubuntu (multiarch
// x86_64 and aarch64), then the generic ones.
func LibraryDirs() []string {
	return []string{
		"usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
		"lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
		"usr/lib", "lib",
	}
}

// Loaders are the paths, relative to a driver root, where glibc's dynamic loader lives on
// x86_64 and aarch64 distributions, in search order.
func Loaders() []string {
	return []string{
		"lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2",
		"lib/ld-linux-aarch64.so.1", "lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
	}
}

// Find returns the first of names (paths relative to root) that exists in root as a regular
// file, resolved with Resolve. The error wraps fs.ErrNotExist and names every path looked at
// (each below root).
func Find(root string, names []string) (string, error) {
	for _, name := range names {
		p, err := Resolve(root, name)
		if err != nil {
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	looked := make([]string, len(names))
	for i, name := range names {
		looked[i] = filepath.Join(root, name)
	}
	return "", fmt.Errorf("none of %s exists: %w", strings.Join(looked, ", "), fs.ErrNotExist)
}

// FindLoader returns the driver root's dynamic loader (the first of Loaders that exists),
// resolved inside the root.
func FindLoader(root string) (string, error) {
	p, err := Find(root, Loaders())
	if err != nil {
		return "", fmt.Errorf("dynamic loader not found: %w", err)
	}
	return p, nil
}

// ExistingLibraryDirs returns the LibraryDirs that exist in root as directories, resolved
// inside the root, in order and without duplicates (on a merged-/usr system "lib64" and
// "usr/lib64" are one directory).
func ExistingLibraryDirs(root string) []string {
	var dirs []string
	seen := map[string]bool{}
	for _, d := range LibraryDirs() {
		p, err := Resolve(root, d)
		if err != nil || seen[p] {
			continue
		}
		if st, err := os.Stat(p); err != nil || !st.IsDir() {
			continue
		}
		seen[p] = true
		dirs = append(dirs, p)
	}
	return dirs
}
