// Package cditest builds fake NVIDIA driver roots for tests of code that generates CDI specs: a
// directory laid out like a host with the driver installed (device nodes, /proc files,
// libraries, binaries, firmware), whose device nodes are plain files with recorded numbers, so
// no privileges (mknod) are needed.
package cditest
