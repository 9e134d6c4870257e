// Package sharingtest provides FakeHost, a host for package sharing with no GPU and no
// privileges: it implements TimeSlicer, ComputeModeSetter, MPSDaemons and Mounter, keeps the
// resulting host state (compute modes, time slices, running daemons, tmpfs mounts), records
// every call, and can be told to fail a call, to block or kill the process before a change,
// and to let a daemon die.
//
// # In memory
//
//	host := sharingtest.NewFakeHost("GPU-0")
//	m := sharing.NewManager("gpu.nvidia.com", sharing.WithTimeSlicer(host),
//		sharing.WithComputeModeSetter(host), sharing.WithMPSDaemons(host))
//	host.FailOn("Start <claim UID>", errors.New("injected"))
//
// # Across process kills
//
// OpenFakeHost keeps the state in a file instead, rewritten atomically on every change and
// read under a file lock on every call, so a crash test can SIGKILL the process from the hook
// at the n-th host change, restart it on the same file, and find the host as the first n-1
// changes left it; two processes (a rolling update) can share the file.
//
//	host, err := sharingtest.OpenFakeHost(filepath.Join(dir, "host.json"), "GPU-0")
//	host.SetHook(func(call string) error {
//		if n++; n == killAt {
//			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
//		}
//		return nil
//	})
package sharingtest
