// Package report is what the node tier's workload container (cmd/gpu-workload) prints about
// itself, and how a test reads it back from the container's log.
package report

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Marker starts the one log line that holds a Report.
const Marker = "GPUDRA-REPORT "

// Report is what a container sees: the environment a driver sets, the device nodes it has,
// what is mounted where.
type Report struct {
	// Env holds the variables whose names start with NVIDIA_, CUDA_ or GPUDRA_.
	Env map[string]string `json:"env"`
	// Devices are the NVIDIA device nodes below /dev, sorted by path.
	Devices []Device `json:"devices"`
	// Mounts maps each mount point to its filesystem type (from /proc/self/mountinfo).
	Mounts map[string]string `json:"mounts"`
	// Dirs lists the entries of the directories named by CUDA_MPS_PIPE_DIRECTORY and
	// CUDA_MPS_LOG_DIRECTORY, and of /dev/shm.
	Dirs map[string][]string `json:"dirs"`
}

// Device is one device node as the container sees it.
type Device struct {
	Path  string `json:"path"`
	Type  string `json:"type"`
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// Open is "ok", or the error opening it read-only gave (ENXIO without a kernel driver).
	Open string `json:"open"`
}

// Line formats r as its log line.
func (r Report) Line() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return Marker + string(b), nil
}

// Parse finds the last Report in a container's log.
func Parse(log string) (Report, error) {
	i := strings.LastIndex(log, Marker)
	if i < 0 {
		return Report{}, fmt.Errorf("no %q line in the container's log:\n%s", strings.TrimSpace(Marker), log)
	}
	line := log[i+len(Marker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var r Report
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return Report{}, fmt.Errorf("report line: %w", err)
	}
	return r, nil
}

// DevicePaths returns the paths of r.Devices.
func (r Report) DevicePaths() []string {
	var p []string
	for _, d := range r.Devices {
		p = append(p, d.Path)
	}
	return p
}
