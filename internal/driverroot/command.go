package driverroot

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinaryDirs are the directories, relative to a driver root, where FindBinary looks for the
// driver's programs, in search order.
func BinaryDirs() []string { return []string{"usr/bin", "usr/sbin", "bin", "sbin"} }

// FindBinary returns the first existing path of the program name under root's BinaryDirs,
// with symbolic links resolved inside the root, or its usr/bin path when none exists (the error
// then comes from running it). An empty root is "/".
func FindBinary(root, name string) string {
	if root == "" {
		root = "/"
	}
	var names []string
	for _, d := range BinaryDirs() {
		names = append(names, filepath.Join(d, name))
	}
	if p, err := Find(root, names); err == nil {
		return p
	}
	return filepath.Join(root, "usr/bin", name)
}

// Command returns the command that runs bin, a program of the driver root root, with args and
// this process's environment plus extraEnv.
//
// For the root "/" (or "") that is bin itself. For any other root it is the root's own dynamic
// loader, in ld.so's documented form `ld.so --library-path DIRS PROGRAM ARGS`, DIRS being the
// root's ExistingLibraryDirs: the program then runs with the C library it was built for and
// finds the driver's libraries, while neither this process's environment nor the child's gets
// LD_LIBRARY_PATH. (Setting LD_LIBRARY_PATH instead makes every process that inherits it —
// this one, host binaries it runs — load the root's libc.so.6 with its own loader, which exits
// 127 with "undefined symbol: ..., version GLIBC_PRIVATE" when the two glibc versions differ.)
// LD_LIBRARY_PATH and LD_PRELOAD inherited from this process are left out of the child's
// environment too, so that the root's programs never load this process's libraries; extraEnv
// is passed as given. The program sees its own path as argv[0]; /proc/self/exe is the loader.
//
// The command is bound to ctx as exec.CommandContext binds it; callers may replace its Cancel
// and WaitDelay.
func Command(ctx context.Context, root, bin string, extraEnv []string, args ...string) (*exec.Cmd, error) {
	if IsHostRoot(root) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), extraEnv...)
		return cmd, nil
	}
	loader, err := FindLoader(root)
	if err != nil {
		return nil, fmt.Errorf("driver root %s: cannot run %s: %w", root, bin, err)
	}
	// Never empty: every loader candidate lies in one of the library directories.
	dirs := ExistingLibraryDirs(root)
	ldArgs := append([]string{"--library-path", strings.Join(dirs, ":"), bin}, args...)
	cmd := exec.CommandContext(ctx, loader, ldArgs...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd, nil
}

// CommandLine names a command made by Command in errors and logs: the program and its
// arguments, and the loader that runs it when that is not the program itself.
func CommandLine(cmd *exec.Cmd, bin string, args []string) string {
	s := strings.TrimSpace(bin + " " + strings.Join(args, " "))
	if len(cmd.Args) > 0 && cmd.Args[0] != bin {
		s += " (run by " + cmd.Args[0] + ")"
	}
	return s
}
