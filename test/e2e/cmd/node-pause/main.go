// Command node-pause is the node tier's pod sandbox ("pause") program: it waits for SIGTERM or
// SIGINT and exits 0. It is built statically and imported into containerd under
// kubenode.SandboxImage's name.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
