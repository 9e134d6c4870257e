package main

import (
	"context"
	"fmt"
	"io"

	inputpkg "github.com/gpudra/gpudra/internal/input"
)

// inputLimitsHelp documents the size limit of each kind of input (help and README say the same).
func inputLimitsHelp() string {
	return fmt.Sprintf(`Input size limits (a larger input is a usage error, exit 2):
  manifests (check FILE|DIR|-)       %s per file
  ResourceSlices (check --slices)    %s
  mig-parted configs, policies,
  kubeconfigs                        %s`,
		inputpkg.FormatSize(inputpkg.ManifestLimit), inputpkg.FormatSize(inputpkg.SlicesLimit), inputpkg.FormatSize(inputpkg.ConfigLimit))
}

// readInputFile reads a file the command line names, at most limit bytes, as text. Every
// failure (missing, unreadable, too large, binary) is a usage error naming the file; a read cut
// short by a signal is not (exitCode makes it a runtime failure).
func readInputFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	data, err := inputpkg.ReadFile(ctx, path, limit)
	return checkText(ctx, path, data, err)
}

// readStdin reads stdin as readInputFile reads a file.
func readStdin(ctx context.Context, stdin io.Reader, limit int64) ([]byte, error) {
	data, err := inputpkg.Read(ctx, stdin, "stdin", limit)
	return checkText(ctx, "stdin", data, err)
}

// readConfigFile reads a mig-parted config or a policy.
func readConfigFile(ctx context.Context, path string) ([]byte, error) {
	return readInputFile(ctx, path, inputpkg.ConfigLimit)
}

func checkText(ctx context.Context, name string, data []byte, err error) ([]byte, error) {
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, usageError(err)
	}
	if err := inputpkg.Text(name, data); err != nil {
		return nil, usageError(err)
	}
	return data, nil
}
