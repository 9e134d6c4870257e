package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpudra/gpudra/gpu/nvmlgpu"
	"github.com/spf13/cobra"
)

const notAvailable = "not available"

// versionInfo is what `version` prints.
type versionInfo struct {
	// Module is the main module's path and version ("(devel)" for a build from a checkout).
	Module  string `json:"module"`
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "(modified)" when the work tree had
	// changes; "not available" for builds without VCS stamping (go run, go test, -buildvcs=false).
	Commit string `json:"commit"`
	Go     string `json:"go"`
	// NVML is the version of the host's NVML library and its driver, read-only; "not available"
	// with the reason when the library cannot be loaded.
	NVML string `json:"nvml"`
}

func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "the driver's module version, commit, Go version and the host's NVML library",
		Args:  noArgs,
	}
	output := outputFlag(cmd, "output format: text or json", "text", "json")
	driverRoot := cmd.Flags().String(flagDriverRoot, "/", "the NVIDIA driver root NVML is loaded from, by its path in the root's library directories "+
		"(/ on a host install; where this runs in a container, the host's driver root mounted into it, e.g. /driver-root)")
	cmd.RunE = runE(func(cmd *cobra.Command, _ []string) error {
		if err := oneOf("output", *output, "text", "json"); err != nil {
			return err
		}
		if !filepath.IsAbs(*driverRoot) {
			return usageErrorf("--%s=%q: must be an absolute path", flagDriverRoot, *driverRoot)
		}
		bi, _ := debug.ReadBuildInfo()
		v := buildVersion(bi)
		v.NVML = nvmlVersion(*driverRoot)
		return writeVersion(cmd.OutOrStdout(), *output, v)
	})
	return cmd
}

// buildVersion reads the module, commit and Go version from the binary's build information.
func buildVersion(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Module: "github.com/gpudra/gpudra", Version: notAvailable, Commit: notAvailable, Go: runtime.Version()}
	if bi == nil {
		return v
	}
	v.Go = bi.GoVersion
	if bi.Main.Path != "" {
		v.Module, v.Version = bi.Main.Path, bi.Main.Version
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && v.Commit != notAvailable {
		v.Commit += " (modified)"
	}
	return v
}

// nvmlVersion loads the NVML library of the driver root read-only, by its path in the root, and
// reports its version and the driver's.
func nvmlVersion(driverRoot string) string {
	sess, err := nvmlgpu.OpenReal(nvmlgpu.WithDriverRoot(driverRoot))
	if err != nil {
		return fmt.Sprintf("%s (%v)", notAvailable, err)
	}
	defer sess.Close()
	lib := sess.Interface()
	ver, ret := lib.SystemGetNVMLVersion()
	if ret != nvml.SUCCESS {
		return fmt.Sprintf("%s (SystemGetNVMLVersion: %s)", notAvailable, nvml.ErrorString(ret))
	}
	if driver, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		return fmt.Sprintf("%s (driver %s)", ver, driver)
	}
	return ver
}

func writeVersion(w io.Writer, output string, v versionInfo) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	_, err := fmt.Fprintf(w, "gpu-dra-driver\n  module:  %s %s\n  commit:  %s\n  go:      %s\n  nvml:    %s\n", v.Module, v.Version, v.Commit, v.Go, v.NVML)
	return err
}
