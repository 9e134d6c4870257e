package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// apiCheckTimeout bounds the request that checks the API server before serve creates anything.
const apiCheckTimeout = 30 * time.Second

// restConfig loads --kubeconfig, or the in-cluster configuration without one. A kubeconfig that
// is not a regular file, larger than inputpkg.ConfigLimit, unreadable or unparsable, and a missing
// in-cluster configuration, are usage errors naming the flag.
func restConfig(ctx context.Context, kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, usageErrorf("kubernetes client configuration: %w (outside a cluster, pass --kubeconfig)", err)
		}
		return cfg, nil
	}
	// Read once, bounded and interruptible, before client-go reads it (unbounded): a FIFO or a
	// device would block or never end there.
	if st, err := os.Stat(kubeconfig); err == nil && !st.Mode().IsRegular() {
		return nil, usageErrorf("kubernetes client configuration: --kubeconfig %s: not a regular file", kubeconfig)
	}
	if _, err := readConfigFile(ctx, kubeconfig); err != nil {
		return nil, kubeconfigError(ctx, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, kubeconfigError(ctx, err)
	}
	return cfg, nil
}

func kubeconfigError(ctx context.Context, err error) error {
	err = fmt.Errorf("kubernetes client configuration: --kubeconfig: %w", err)
	if ctx.Err() != nil {
		return err
	}
	return usageError(err)
}

// checkAPIServer asks the API server for its version: unreachable or refusing the credentials,
// serve fails (exit 3) before it creates anything on the node.
func checkAPIServer(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, apiCheckTimeout)
	defer cancel()
	if err := client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("API server: %w", err)
	}
	return nil
}

// checkDirs checks, without creating anything, that each directory exists or can be created:
// its nearest existing ancestor is a directory. A file in the way is a usage error.
func checkDirs(flagDirs map[string]string) error {
	for flagName, dir := range flagDirs {
		for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
			st, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) && p != filepath.Dir(p) {
				continue
			}
			if err != nil {
				return usageErrorf("--%s=%q: %w", flagName, dir, err)
			}
			if !st.IsDir() {
				return usageErrorf("--%s=%q: %s is not a directory", flagName, dir, p)
			}
			break
		}
	}
	return nil
}
