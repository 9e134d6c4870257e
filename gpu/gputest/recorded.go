package gputest

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/mig"
)

// printouts holds the recorded nvidia-smi output (see printouts/README.md). It is read-only.
//
//go:embed printouts/*.txt
var printouts embed.FS

// Recording is one public recording of `nvidia-smi mig` output on one GPU model, as kept in
// gputest's printouts directory (its README names every source).
type Recording struct {
	// File is the file name, e.g. "rtx-pro-6000.txt".
	File string
	// Model is the mig catalog model the GPU belongs to.
	Model string
	// ProductName is the NVML product name of the recorded GPU.
	ProductName string
	// Source says where the output was published.
	Source string
	// Driver is the driver version, or a sentence when the recording does not show it.
	Driver string
	// MemorySupersededBy names the newer recording whose memory sizes the catalog follows; it is
	// empty when this recording's memory sizes are the current ones.
	MemorySupersededBy string
	// Notes say what was changed or left out while transcribing.
	Notes []string
	// Profiles is the `nvidia-smi mig -lgip` output, "" when not recorded.
	Profiles string
	// Placements is the `nvidia-smi mig -lgipp` output, "" when not recorded.
	Placements string
	// Instances are the `nvidia-smi mig -lgi` outputs, in the order recorded.
	Instances []string
}

// Recordings returns every recording, ordered by file name. The files are embedded in the
// package; an error means one of them is malformed.
func Recordings() ([]Recording, error) {
	names, err := fs.Glob(printouts, "printouts/*.txt")
	if err != nil {
		return nil, fmt.Errorf("gputest: list recordings: %w", err)
	}
	slices.Sort(names)
	out := make([]Recording, 0, len(names))
	for _, n := range names {
		data, err := printouts.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("gputest: read recording %s: %w", n, err)
		}
		r, err := parseRecording(path.Base(n), string(data))
		if err != nil {
			return nil, fmt.Errorf("gputest: recording %s: %w", path.Base(n), err)
		}
		out = append(out, r)
	}
	return out, nil
}

// parseRecording reads "# key: value" headers, then sections started by "$ " command lines.
func parseRecording(file, text string) (Recording, error) {
	r := Recording{File: file}
	var kind string
	var body []string
	flush := func() {
		t := strings.Join(body, "\n")
		switch kind {
		case "-lgipp":
			r.Placements = t
		case "-lgip":
			r.Profiles = t
		case "-lgi":
			r.Instances = append(r.Instances, t)
		}
		body = nil
	}
	for i, line := range strings.Split(text, "\n") {
		switch {
		case kind == "" && strings.HasPrefix(line, "# "):
			if err := r.header(strings.TrimPrefix(line, "# ")); err != nil {
				return r, fmt.Errorf("line %d: %w", i+1, err)
			}
		case strings.HasPrefix(line, "$ "):
			flush()
			k, err := sectionKind(line)
			if err != nil {
				return r, fmt.Errorf("line %d: %w", i+1, err)
			}
			kind = k
		case kind == "":
			if strings.TrimSpace(line) != "" {
				return r, fmt.Errorf("line %d: text before the first \"$ nvidia-smi mig ...\" line", i+1)
			}
		default:
			body = append(body, line)
		}
	}
	flush()
	switch {
	case r.Model == "" || r.Source == "" || r.ProductName == "":
		return r, fmt.Errorf("the model, product and source headers are required")
	case r.Profiles == "" && r.Placements == "" && len(r.Instances) == 0:
		return r, fmt.Errorf("no -lgip, -lgipp or -lgi section")
	}
	return r, nil
}

func (r *Recording) header(kv string) error {
	k, v, ok := strings.Cut(kv, ": ")
	if !ok {
		return fmt.Errorf("header %q is not \"key: value\"", kv)
	}
	switch k {
	case "model":
		r.Model = v
	case "product":
		r.ProductName = v
	case "source":
		r.Source = v
	case "driver":
		r.Driver = v
	case "memory":
		if v != "current" {
			f, ok := strings.CutPrefix(v, "superseded by ")
			if !ok {
				return fmt.Errorf("memory header %q: want \"current\" or \"superseded by FILE\"", v)
			}
			r.MemorySupersededBy = f
		}
	case "note":
		r.Notes = append(r.Notes, v)
	default:
		return fmt.Errorf("unknown header %q (model, product, source, driver, memory, note)", k)
	}
	return nil
}

// sectionKind tells which listing a command line printed.
func sectionKind(cmd string) (string, error) {
	for _, k := range []string{"-lgipp", "-lgip", "-lgi"} {
		if slices.Contains(strings.Fields(cmd), k) {
			return k, nil
		}
	}
	return "", fmt.Errorf("command %q prints none of -lgip, -lgipp, -lgi", cmd)
}

// recordedModel builds the MIG geometry that the fakes serve for a catalog model from the
// recordings of that model: the current -lgip recording gives every profile it lists (Id,
// memory, SMs, engines, instance count) and -lgipp recordings give placements. What no recording
// covers (a profile the printout lacks, placements without -lgipp, compute-instance profiles)
// comes from the catalog entry cat and keeps its source markers, so a fake says per field what
// is recorded and what is inferred. Without a recording the result is a copy of cat.
func recordedModel(cat *mig.Model, recs []Recording) (*mig.Model, error) {
	out := cat.Clone()
	var current *Recording
	var placements []mig.SMIPlacements
	for i := range recs {
		r := &recs[i]
		if r.Model != cat.Name {
			continue
		}
		if r.Profiles != "" && r.MemorySupersededBy == "" {
			if current != nil {
				return nil, fmt.Errorf("model %s: two current -lgip recordings, %s and %s", cat.Name, current.File, r.File)
			}
			current = r
		}
		if r.Placements != "" {
			pl, err := mig.ParseSMIPlacements(r.Placements)
			if err != nil {
				return nil, fmt.Errorf("recording %s: %w", r.File, err)
			}
			placements = append(placements, pl...)
		}
	}
	if current == nil {
		return out, nil
	}
	rows, err := mig.ParseSMIProfiles(current.Profiles)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", current.File, err)
	}
	rec, err := mig.ModelFromSMI(cat.Name, cat.MemoryMiB, 0, rows, placements)
	if err != nil {
		return nil, fmt.Errorf("recording %s: %w", current.File, err)
	}
	for _, rp := range rec.Profiles {
		if err := mergeRecorded(out, rp); err != nil {
			return nil, fmt.Errorf("recording %s: %w", current.File, err)
		}
	}
	for _, p := range out.Profiles {
		for _, pl := range p.Placements {
			out.MemorySlices = max(out.MemorySlices, pl.End())
		}
		out.ComputeSlices = max(out.ComputeSlices, p.ComputeSlices)
	}
	return out, nil
}

// mergeRecorded replaces the catalog profile of the same name in m with the recorded values of
// rp. Compute-instance profiles stay the catalog's (nvidia-smi -lgip does not list them), with the
// full-size one given the recorded SM count.
func mergeRecorded(m *mig.Model, rp mig.GIProfile) error {
	cp, ok := m.Profile(rp.Name)
	if !ok || cp.Name != rp.Name {
		return fmt.Errorf("profile %s (Id %d) is recorded for %s but missing from the mig catalog, which supplies its compute-instance profiles",
			rp.Name, rp.ID, m.Name)
	}
	if rp.Placements == nil {
		rp.Placements = cp.Placements
		rp.Sources.Placements = cp.Sources.Placements
	}
	rp.ComputeProfiles = cp.ComputeProfiles
	for i := range rp.ComputeProfiles {
		if rp.ComputeProfiles[i].Slices == rp.ComputeSlices {
			rp.ComputeProfiles[i].Multiprocessors = rp.Multiprocessors
		}
	}
	*cp = rp
	return nil
}
