package mig

import (
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SMIProfile is one row of `nvidia-smi mig -lgip`: a GPU-instance profile as the driver lists it.
type SMIProfile struct {
	// GPU is the GPU index of the row.
	GPU int
	// Name is the profile name without the "MIG " prefix, e.g. "1g.10gb+me".
	Name string
	// ID is the profile Id (the number -cgi takes).
	ID int
	// Free and Total are the "Instances Free/Total" column.
	Free, Total int
	// MemoryGiB is the memory column exactly as printed, e.g. "9.62" (two decimals, GiB).
	MemoryGiB string
	// P2P is the P2P column.
	P2P bool
	// The SM, engine and copy-engine columns.
	Multiprocessors, Decoders, Encoders, CopyEngines, JpegEngines, OfaEngines int
}

// SMIPlacements is one line of `nvidia-smi mig -lgipp`: the possible placements of one profile.
type SMIPlacements struct {
	// GPU is the GPU index of the line.
	GPU int
	// ProfileID is the profile Id the placements belong to.
	ProfileID int
	// Placements are the placements, in memory slices (placement units).
	Placements []Placement
}

// SMIInstance is one row of `nvidia-smi mig -lgi`: an existing GPU instance.
type SMIInstance struct {
	// GPU is the GPU index of the row.
	GPU int
	// Name is the profile name without the "MIG " prefix.
	Name string
	// ProfileID is the profile Id of the instance.
	ProfileID int
	// InstanceID is the GPU instance Id.
	InstanceID int
	// Placement is where the instance sits ("Start:Size").
	Placement Placement
}

// tableCells splits the "|"-framed lines of an nvidia-smi table into whitespace-separated cells,
// one slice per line, with the line number (1-based). Border, separator and blank lines are
// skipped.
func tableCells(text string) (lines [][]string, lineNos []int) {
	for i, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|=") {
			continue
		}
		l = strings.Trim(l, "|")
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		lines = append(lines, f)
		lineNos = append(lineNos, i+1)
	}
	return lines, lineNos
}

func atois(cells []string) ([]int, bool) {
	out := make([]int, len(cells))
	for i, c := range cells {
		n, err := strconv.Atoi(c)
		if err != nil || n < 0 {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

// ParseSMIProfiles reads the output of `nvidia-smi mig -lgip` (any table width; several GPUs).
// Each profile row spans two lines: GPU, "MIG <name>", ID, Free/Total, memory GiB, P2P, SM, DEC,
// ENC, then CE, JPEG, OFA. Header lines are skipped; a row that does not have this shape is an
// error naming the line.
func ParseSMIProfiles(text string) ([]SMIProfile, error) {
	lines, nos := tableCells(text)
	var out []SMIProfile
	for i := 0; i < len(lines); i++ {
		f := lines[i]
		if len(f) < 2 || f[1] != "MIG" {
			continue // title and header lines
		}
		p, err := parseSMIProfileRow(f)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi -lgip line %d: %w", nos[i], err)
		}
		if i+1 >= len(lines) {
			return nil, fmt.Errorf("nvidia-smi -lgip line %d: profile %s has no second line (CE JPEG OFA)", nos[i], p.Name)
		}
		second, ok := atois(lines[i+1])
		if !ok || len(second) != 3 {
			return nil, fmt.Errorf("nvidia-smi -lgip line %d: profile %s: want the CE, JPEG and OFA counts, got %q", nos[i+1], p.Name, strings.Join(lines[i+1], " "))
		}
		p.CopyEngines, p.JpegEngines, p.OfaEngines = second[0], second[1], second[2]
		out = append(out, p)
		i++
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nvidia-smi -lgip: no profile rows found")
	}
	return out, nil
}

func parseSMIProfileRow(f []string) (SMIProfile, error) {
	// GPU MIG name ID free/total mem P2P SM DEC ENC
	if len(f) != 10 {
		return SMIProfile{}, fmt.Errorf("want 10 columns (GPU, MIG name, ID, Free/Total, GiB, P2P, SM, DEC, ENC), got %d: %q", len(f), strings.Join(f, " "))
	}
	p := SMIProfile{Name: f[2], MemoryGiB: f[5]}
	if _, err := ParseProfile(p.Name); err != nil {
		return p, err
	}
	free, total, ok := strings.Cut(f[4], "/")
	nums, ok2 := atois([]string{f[0], f[3], free, total, f[7], f[8], f[9]})
	if !ok || !ok2 {
		return p, fmt.Errorf("profile %s: non-numeric GPU, ID, Free/Total, SM, DEC or ENC column in %q", p.Name, strings.Join(f, " "))
	}
	p.GPU, p.ID, p.Free, p.Total, p.Multiprocessors, p.Decoders, p.Encoders = nums[0], nums[1], nums[2], nums[3], nums[4], nums[5], nums[6]
	switch f[6] {
	case "Yes":
		p.P2P = true
	case "No":
	default:
		return p, fmt.Errorf("profile %s: P2P column %q is neither Yes nor No", p.Name, f[6])
	}
	if _, err := MemoryMiBFromGiB(p.MemoryGiB); err != nil {
		return p, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	return p, nil
}

var placementLine = regexp.MustCompile(`^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([0-9,]+)\}:(\d+)$`)

// ParseSMIPlacements reads the output of `nvidia-smi mig -lgipp`: lines such as
// "GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1". Blank lines are skipped; any other line is
// an error naming it.
func ParseSMIPlacements(text string) ([]SMIPlacements, error) {
	var out []SMIPlacements
	for i, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if l == "" {
			continue
		}
		m := placementLine.FindStringSubmatch(l)
		if m == nil {
			return nil, fmt.Errorf("nvidia-smi -lgipp line %d: %q is not \"GPU <n> Profile ID <id> Placements: {<starts>}:<size>\"", i+1, l)
		}
		nums, _ := atois([]string{m[1], m[2], m[4]})
		starts, ok := atois(strings.Split(m[3], ","))
		if !ok || nums[2] == 0 {
			return nil, fmt.Errorf("nvidia-smi -lgipp line %d: bad starts or size in %q", i+1, l)
		}
		pl := SMIPlacements{GPU: nums[0], ProfileID: nums[1]}
		for _, s := range starts {
			pl.Placements = append(pl.Placements, Placement{Start: s, Size: nums[2]})
		}
		out = append(out, pl)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nvidia-smi -lgipp: no placement lines found")
	}
	return out, nil
}

// ParseSMIInstances reads the output of `nvidia-smi mig -lgi`: rows of GPU, "MIG <name>", profile
// Id, instance Id and "Start:Size".
func ParseSMIInstances(text string) ([]SMIInstance, error) {
	lines, nos := tableCells(text)
	var out []SMIInstance
	for i, f := range lines {
		if len(f) < 2 || f[1] != "MIG" {
			continue
		}
		if len(f) != 6 {
			return nil, fmt.Errorf("nvidia-smi -lgi line %d: want 6 columns (GPU, MIG name, profile ID, instance ID, start:size), got %q", nos[i], strings.Join(f, " "))
		}
		start, size, _ := strings.Cut(f[5], ":")
		nums, ok := atois([]string{f[0], f[3], f[4], start, size})
		if !ok {
			return nil, fmt.Errorf("nvidia-smi -lgi line %d: non-numeric column in %q", nos[i], strings.Join(f, " "))
		}
		if _, err := ParseProfile(f[2]); err != nil {
			return nil, fmt.Errorf("nvidia-smi -lgi line %d: %w", nos[i], err)
		}
		out = append(out, SMIInstance{GPU: nums[0], Name: f[2], ProfileID: nums[1], InstanceID: nums[2],
			Placement: Placement{Start: nums[3], Size: nums[4]}})
	}
	return out, nil
}

// FormatGiB formats a memory size in MiB the way nvidia-smi prints GiB: two decimals, exact ties
// rounded to even (9856 MiB is "9.62").
func FormatGiB(mib uint64) string { return strconv.FormatFloat(float64(mib)/1024, 'f', 2, 64) }

// MemoryMiBFromGiB turns nvidia-smi's two-decimal GiB column back into MiB. The column is only
// known to 0.01 GiB (about 10 MiB), so the result is the value among those that print the same
// with the most trailing zero bits: MIG memory sizes are multiples of 128 MiB on every recorded
// GPU except a few at 64 MiB (A30). FormatGiB of the result always gives printed back.
func MemoryMiBFromGiB(printed string) (uint64, error) {
	g, err := strconv.ParseFloat(printed, 64)
	if err != nil || g <= 0 || math.IsInf(g, 0) {
		return 0, fmt.Errorf("memory %q is not a positive GiB value", printed)
	}
	lo := uint64(math.Max(1, math.Floor((g-0.006)*1024)))
	hi := uint64(math.Ceil((g + 0.006) * 1024))
	var best uint64
	for v := lo; v <= hi; v++ {
		if FormatGiB(v) != printed {
			continue
		}
		if best == 0 || bits.TrailingZeros64(v) > bits.TrailingZeros64(best) {
			best = v
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("memory %q GiB is not printed by any whole number of MiB", printed)
	}
	return best, nil
}

// enumFor infers NVML's GPU_INSTANCE_PROFILE_* enum from a profile name, which nvidia-smi does not
// print. rev2 says the profile is the plain 1-slice one with twice the memory ("1g.10gb" beside
// "1g.5gb" on an A100). The mapping follows nvml.h's enum comments.
func enumFor(p Profile, rev2 bool) (int, error) {
	plain := map[int]int{1: enum1Slice, 2: enum2Slice, 3: enum3Slice, 4: enum4Slice, 6: enum6Slice, 7: enum7Slice, 8: enum8Slice}
	var table map[int]int
	switch p.mediaClass() {
	case mediaME:
		table = map[int]int{1: enum1SliceRev1, 2: enum2SliceRev1}
	case mediaNoME:
		table = map[int]int{1: enum1SliceNoME, 2: enum2SliceNoME}
	case mediaAllME:
		table = map[int]int{1: enum1SliceAllME, 2: enum2SliceAllME}
	default:
		switch {
		case p.HasAttribute(AttributeGraphics):
			table = map[int]int{1: enum1SliceGfx, 2: enum2SliceGfx, 3: enum3SliceGfx, 4: enum4SliceGfx}
		case len(p.Attributes) > 0:
			return 0, fmt.Errorf("profile %s: no NVML enum for attributes %v", p, p.Attributes)
		case rev2 && p.G == 1:
			return enum1SliceRev2, nil
		default:
			table = plain
		}
	}
	e, ok := table[p.G]
	if !ok {
		return 0, fmt.Errorf("profile %s: no NVML enum for %d compute slices with this suffix", p, p.G)
	}
	return e, nil
}

// ModelFromSMI builds a Model from the -lgip rows and -lgipp lines of one GPU (index gpu), as a
// recording printed them. Every value it takes from the printout is marked SourceRecorded;
// profiles without a -lgipp line have no placements (Sources.Placements empty) and the caller
// fills them in. The NVML enum, which nvidia-smi does not print, is inferred from the name (see
// GIProfile.Enum). Name is the model name to use and gpuMemoryMiB the whole GPU's memory.
func ModelFromSMI(name string, gpuMemoryMiB uint64, gpu int, profiles []SMIProfile, placements []SMIPlacements) (*Model, error) {
	m := &Model{Name: name, MemoryMiB: gpuMemoryMiB}
	rows := slices.DeleteFunc(slices.Clone(profiles), func(p SMIProfile) bool { return p.GPU != gpu })
	if len(rows) == 0 {
		return nil, fmt.Errorf("model %s: no -lgip rows for GPU %d", name, gpu)
	}
	// The plain 1-slice profile with the larger memory is the REV2 one.
	smallest1g := ""
	for _, r := range rows {
		p, _ := ParseProfile(r.Name)
		if p.G == 1 && len(p.Attributes)+len(p.NegAttributes) == 0 && (smallest1g == "" || p.GB < MustParseProfile(smallest1g).GB) {
			smallest1g = r.Name
		}
	}
	for _, r := range rows {
		gp, err := smiProfile(r, smallest1g)
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", name, err)
		}
		if _, dup := m.ProfileByID(gp.ID); dup {
			return nil, fmt.Errorf("model %s: profile Id %d listed twice", name, gp.ID)
		}
		m.Profiles = append(m.Profiles, gp)
		m.ComputeSlices = max(m.ComputeSlices, gp.ComputeSlices)
	}
	for _, pl := range placements {
		if pl.GPU != gpu {
			continue
		}
		p, ok := m.ProfileByID(pl.ProfileID)
		if !ok {
			return nil, fmt.Errorf("model %s: -lgipp lists profile Id %d, which -lgip does not", name, pl.ProfileID)
		}
		p.Placements = slices.Clone(pl.Placements)
		p.Sources.Placements = SourceRecorded
		for _, x := range p.Placements {
			m.MemorySlices = max(m.MemorySlices, x.End())
		}
	}
	return m, nil
}

func smiProfile(r SMIProfile, smallest1g string) (GIProfile, error) {
	p, err := ParseProfile(r.Name)
	if err != nil {
		return GIProfile{}, err
	}
	enum, err := enumFor(p, p.G == 1 && r.Name != smallest1g && len(p.Attributes)+len(p.NegAttributes) == 0)
	if err != nil {
		return GIProfile{}, err
	}
	mem, err := MemoryMiBFromGiB(r.MemoryGiB)
	if err != nil {
		return GIProfile{}, fmt.Errorf("profile %s: %w", r.Name, err)
	}
	src := allSources(SourceRecorded)
	src.Placements = ""
	return GIProfile{
		Name: r.Name, Enum: enum, ID: r.ID, ComputeSlices: p.G, MemoryMiB: mem,
		Multiprocessors: r.Multiprocessors, CopyEngines: r.CopyEngines, Decoders: r.Decoders, Encoders: r.Encoders,
		JpegEngines: r.JpegEngines, OfaEngines: r.OfaEngines, InstanceCount: r.Total, Sources: src,
	}, nil
}
