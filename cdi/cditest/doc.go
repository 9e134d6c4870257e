// Package cditest builds fake NVIDIA driver roots: a directory laid out like a host with the
// driver installed (device nodes, /proc files, libraries, binaries, firmware), whose device
// nodes are plain files with recorded numbers, so no privileges (mknod) are needed.
//
// It does not import the testing package, so programs use it as well as tests: the reference
// driver's demo and `serve --fake` generate their CDI specs against a fake root, and a driver
// author can try a driver on a machine without NVIDIA's driver.
//
//	root, err := cditest.Build(dir, cditest.Layout{GPUs: 2})
//	if err != nil {
//		return err
//	}
//	inst, err := cdi.Discover(root)
package cditest
