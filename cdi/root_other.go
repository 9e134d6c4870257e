//go:build !unix

package cdi

import "fmt"

func statDeviceNode(p string) (NodeInfo, error) {
	return NodeInfo{}, fmt.Errorf("device node %s: device nodes are only supported on Unix", p)
}
