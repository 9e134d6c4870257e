// Package driverroot finds files in an NVIDIA driver root (the directory a driver is installed
// in: "/" on a host install, the host's driver root mounted into a container otherwise) the way
// the driver root's own processes would see them, and without leaking the driver root's
// libraries into this process.
//
// A symbolic link inside a driver root is relative to that root, not to this process's "/":
// "/driver-root/lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" names
// "/driver-root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2". Resolve follows links that way;
// os.Stat and filepath.EvalSymlinks would follow them into this process's own files.
//
// LibraryDirs and Loaders are the places driver libraries and the dynamic loader live on the
// distributions NVIDIA supports; FindLoader and ExistingLibraryDirs look them up in a root.
//
// FindBinary and Command run a driver program (nvidia-smi, nvidia-cuda-mps-control,
// nvidia-imex) of a root other than "/" with that root's own dynamic loader, never with
// LD_LIBRARY_PATH; package sharing and package computedomain/imex share them.
package driverroot
