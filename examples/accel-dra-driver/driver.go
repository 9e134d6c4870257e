package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpudra/gpudra/draplugin/exclusive"
)

// accelDriver drives the imaginary accelerators of a node: device nodes /dev/accel<N> under
// root, and for each a sysfs-like directory sys/class/accel/accel<N> whose "model" file names
// the model and whose "owner" file holds the UID of the claim the device is reserved for (the
// imaginary kernel driver lets only that claim's containers open it).
type accelDriver struct {
	root string
}

var _ exclusive.Driver = accelDriver{}

func (d accelDriver) devNode(n int) string {
	return filepath.Join(d.root, "dev", "accel"+strconv.Itoa(n))
}
func (d accelDriver) sysFile(n int, name string) string {
	return filepath.Join(d.root, "sys", "class", "accel", "accel"+strconv.Itoa(n), name)
}

// indexOf is N of the DRA device name accel-<N>.
func indexOf(device string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(device, "accel-"))
	if err != nil || n < 0 || "accel-"+strconv.Itoa(n) != device {
		return 0, fmt.Errorf("device name %q is not accel-<N>", device)
	}
	return n, nil
}

// Devices lists /dev/accel<N>, by N, as accel-<N> with attributes index and model.
func (d accelDriver) Devices(context.Context) ([]resourceapi.Device, error) {
	nodes, err := filepath.Glob(filepath.Join(d.root, "dev", "accel*"))
	if err != nil {
		return nil, err
	}
	var indexes []int
	for _, p := range nodes {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "accel")); err == nil && n >= 0 {
			indexes = append(indexes, n)
		}
	}
	slices.Sort(indexes)
	devices := make([]resourceapi.Device, 0, len(indexes))
	for _, n := range indexes {
		model := "unknown"
		if b, err := os.ReadFile(d.sysFile(n, "model")); err == nil {
			model = strings.TrimSpace(string(b))
		}
		devices = append(devices, resourceapi.Device{Name: "accel-" + strconv.Itoa(n),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(n))}, "model": {StringValue: &model}}})
	}
	return devices, nil
}

// Prepare reserves the device for the claim and gives the container its device node and
// ACCEL_VISIBLE_DEVICES. A device reserved for another claim is refused.
func (d accelDriver) Prepare(_ context.Context, claim *resourceapi.ResourceClaim, device string) (specs.ContainerEdits, error) {
	n, err := indexOf(device)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	if _, err := os.Stat(d.devNode(n)); err != nil {
		return specs.ContainerEdits{}, fmt.Errorf("device node: %w", err)
	}
	owner, err := d.owner(n)
	if err != nil {
		return specs.ContainerEdits{}, err
	}
	if owner != "" && owner != claim.UID {
		return specs.ContainerEdits{}, fmt.Errorf("%s is reserved for claim %s", device, owner)
	}
	if err := os.WriteFile(d.sysFile(n, "owner"), []byte(claim.UID+"\n"), 0o644); err != nil {
		return specs.ContainerEdits{}, fmt.Errorf("reserve %s: %w", device, err)
	}
	return specs.ContainerEdits{
		DeviceNodes: []*specs.DeviceNode{{Path: "/dev/accel" + strconv.Itoa(n), HostPath: d.devNode(n)}},
		Env:         []string{"ACCEL_VISIBLE_DEVICES=" + strconv.Itoa(n)},
	}, nil
}

// Unprepare releases the device when it is reserved for the claim.
func (d accelDriver) Unprepare(_ context.Context, claimUID types.UID, device string) error {
	n, err := indexOf(device)
	if err != nil {
		return err
	}
	owner, err := d.owner(n)
	if err != nil || owner != claimUID {
		return err
	}
	if err := os.Remove(d.sysFile(n, "owner")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release %s: %w", device, err)
	}
	return nil
}

// owner is the claim the device is reserved for, "" for none.
func (d accelDriver) owner(n int) (types.UID, error) {
	b, err := os.ReadFile(d.sysFile(n, "owner"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read owner of accel%d: %w", n, err)
	}
	return types.UID(strings.TrimSpace(string(b))), nil
}
