package gputest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/gpudra/gpudra/mig"
)

// WithStateDir keeps the changeable state of each GPU — MIG mode, compute mode, GPU and compute
// instances with their ids and MIG device UUIDs — in a file per GPU in dir (gpu-<index>.json),
// as the hardware keeps it when the process driving it dies. When the files exist, New starts
// from them instead of from the MIG options; otherwise New writes the initial state there. A
// change is written at once (a temporary file renamed over the GPU's file; not fsynced: it
// survives a killed process, not a power loss, as GPU state does not either), and a call on a
// GPU first reads its file again when another process changed it. Several processes may so
// share one machine as long as they do not change one GPU at the same time, as drivers that
// lock each GPU do (two plugin pods during a rolling update).
func WithStateDir(dir string) Option {
	return func(c *config) error {
		if dir == "" {
			return errors.New("gputest: WithStateDir: empty directory")
		}
		c.stateDir = dir
		return nil
	}
}

// WithCallHook calls hook at the start of every NVML call, with the call's qualified name
// ("Device.CreateGpuInstanceWithPlacement", "GpuInstance.Destroy"), before any injected fault.
// The machine's lock is held: hook must not call the machine. It is meant for crash tests that
// kill the process at the n-th call of a method.
func WithCallHook(hook func(call string)) Option {
	return func(c *config) error {
		c.callHook = hook
		return nil
	}
}

type savedGPU struct {
	Generation  uint64    `json:"generation"`
	MIGMode     int       `json:"migMode"`
	ComputeMode int       `json:"computeMode"`
	GIs         []savedGI `json:"gpuInstances,omitempty"`
}

type savedGI struct {
	ID        uint32    `json:"id"`
	ProfileID int       `json:"profileID"`
	Start     int       `json:"start"`
	Size      int       `json:"size"`
	CIs       []savedCI `json:"computeInstances,omitempty"`
}

type savedCI struct {
	ID        uint32 `json:"id"`
	ProfileID int    `json:"profileID"`
	Start     int    `json:"start"`
	UUID      string `json:"uuid"`
	// ComputeMode is the MIG device's compute mode.
	ComputeMode int `json:"computeMode,omitempty"`
}

// loadOrSaveState starts the machine from its state files, or writes them from the state the
// options built. New has not returned yet.
func (m *Machine) loadOrSaveState(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("gputest: state directory: %w", err)
	}
	m.stateDir = dir
	for _, d := range m.devices {
		if _, err := os.Stat(d.stateFile()); errors.Is(err, os.ErrNotExist) {
			if err := d.save(); err != nil {
				return err
			}
			continue
		}
		if err := d.load(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) stateFile() string {
	return filepath.Join(d.m.stateDir, fmt.Sprintf("gpu-%d.json", d.index))
}

// sync reads the GPU's state file again when another process changed it. The caller holds
// m.mu.
func (d *Device) sync() {
	if d.m.stateDir == "" || statID(d.stateFile()) == d.loaded {
		return
	}
	if err := d.load(); err != nil {
		panic(err) // the test's model of the hardware is broken
	}
}

func (d *Device) load() error {
	path := d.stateFile()
	id := statID(path)
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("gputest: state of GPU %d: %w", d.index, err)
	}
	var g savedGPU
	if err := json.Unmarshal(b, &g); err != nil {
		return fmt.Errorf("gputest: state file %s: %w", path, err)
	}
	if err := d.restore(g); err != nil {
		return fmt.Errorf("gputest: state file %s: %w", path, err)
	}
	d.loaded = id
	return nil
}

// restore sets a device's changeable state from its saved form.
func (d *Device) restore(g savedGPU) error {
	d.generation, d.migMode, d.computeMode = g.Generation, g.MIGMode, nvml.ComputeMode(g.ComputeMode)
	d.gis = map[uint32]*GpuInstance{}
	for _, sg := range g.GIs {
		if d.geometry == nil {
			return errors.New("GPU instances on a GPU without MIG geometry")
		}
		p, ok := d.geometry.ProfileByID(sg.ProfileID)
		if !ok {
			return fmt.Errorf("GPU instance %d has profile Id %d, unknown to %s", sg.ID, sg.ProfileID, d.geometry.Name)
		}
		gi := &GpuInstance{d: d, id: sg.ID, profile: p, placement: mig.Placement{Start: sg.Start, Size: sg.Size}, cis: map[uint32]*ComputeInstance{}}
		gi.setFuncs()
		for _, sc := range sg.CIs {
			i := slices.IndexFunc(p.ComputeProfiles, func(c mig.ComputeProfile) bool { return c.ID == sc.ProfileID })
			if i < 0 {
				return fmt.Errorf("compute instance %d of GPU instance %d has profile Id %d, unknown to %s", sc.ID, sg.ID, sc.ProfileID, p.Name)
			}
			ci := &ComputeInstance{gi: gi, id: sc.ID, profile: &p.ComputeProfiles[i], start: sc.Start}
			ci.dev = &MIGDeviceHandle{ci: ci, uuid: sc.UUID, computeMode: nvml.ComputeMode(sc.ComputeMode)}
			ci.setFuncs()
			ci.dev.setFuncs()
			gi.cis[sc.ID] = ci
		}
		d.gis[sg.ID] = gi
	}
	return nil
}

// save writes the GPU's state file.
func (d *Device) save() error {
	g := savedGPU{Generation: d.generation, MIGMode: d.migMode, ComputeMode: int(d.computeMode)}
	for _, id := range slices.Sorted(maps.Keys(d.gis)) {
		gi := d.gis[id]
		sg := savedGI{ID: gi.id, ProfileID: gi.profile.ID, Start: gi.placement.Start, Size: gi.placement.Size}
		for _, cid := range slices.Sorted(maps.Keys(gi.cis)) {
			ci := gi.cis[cid]
			sg.CIs = append(sg.CIs, savedCI{ID: ci.id, ProfileID: ci.profile.ID, Start: ci.start, UUID: ci.dev.uuid, ComputeMode: int(ci.dev.computeMode)})
		}
		g.GIs = append(g.GIs, sg)
	}
	b, err := json.MarshalIndent(g, "", " ")
	if err != nil {
		return fmt.Errorf("gputest: state of GPU %d: %w", d.index, err)
	}
	path := d.stateFile()
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("gputest: state of GPU %d: %w", d.index, err)
	}
	_, werr := tmp.Write(b)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("gputest: state of GPU %d: %w", d.index, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("gputest: state of GPU %d: %w", d.index, err)
	}
	d.loaded = statID(path)
	return nil
}

// changed records a change of the GPU's state: with WithStateDir it writes the GPU's file. A
// failure to write it panics: the test's model of the hardware would be wrong from then on.
func (d *Device) changed() {
	if d.m.stateDir == "" {
		return
	}
	if err := d.save(); err != nil {
		panic(err)
	}
}

// fileID identifies one version of a state file: every save renames a new file into place.
type fileID struct {
	ino, size, mtime, ctime int64
}

func statID(path string) fileID {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileID{}
	}
	return fileID{ino: int64(st.Ino), size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
