package mig

// This file holds the built-in geometry tables. Every profile carries, field by field, where its
// values come from (GIProfile.Sources):
//
//   - SourceRecorded values are printed by nvidia-smi (-lgip, -lgipp) on that model in a public
//     recording kept in gpu/gputest/printouts (the README there names each source); the catalog
//     tests compare them field by field, and the fake machines are built from the recordings.
//   - SourceDocumented values come from NVIDIA: the MIG User Guide's profile tables (engine and
//     copy-engine counts, instance counts), mig-parted's built-in configuration (profile names,
//     instance counts, PCI ids), or nvidia-smi output NVIDIA staff quoted in public issues.
//   - SourceInferred values are carried over from a sibling model (same chip, same profile names)
//     or are arithmetic. Placements of the 8-slice parts without a -lgipp recording follow the
//     A100/H100 geometry (3g has size 4, 7g size 8); NVIDIA's DRA driver states this for B200.
//     go-nvml's Hopper/Blackwell mocks contradict it and are deliberately not used.
//
// Memory sizes change between driver releases (B200 1g.23gb printed 22.00 GiB with R570 and 20.50
// GiB later); the catalog follows the newest recording. mig/nvmlmig.ModelFromDevice reads the live
// values and Compare reports every difference.

// NVML GPU_INSTANCE_PROFILE_* enum values (nvml.h). They are repeated here so that the catalog does
// not depend on go-nvml (whose bindings need cgo) or on a particular version's constant set.
const (
	enum1Slice      = 0
	enum2Slice      = 1
	enum3Slice      = 2
	enum4Slice      = 3
	enum7Slice      = 4
	enum8Slice      = 5
	enum6Slice      = 6
	enum1SliceRev1  = 7
	enum2SliceRev1  = 8
	enum1SliceRev2  = 9
	enum1SliceGfx   = 10
	enum2SliceGfx   = 11
	enum4SliceGfx   = 12
	enum1SliceNoME  = 13
	enum2SliceNoME  = 14
	enum1SliceAllME = 15
	enum2SliceAllME = 16
	enum3SliceGfx   = 17
)

// NVML COMPUTE_INSTANCE_PROFILE_* enum values.
const (
	ciEnum1Slice = 0
	ciEnum2Slice = 1
	ciEnum3Slice = 2
	ciEnum4Slice = 3
	ciEnum7Slice = 4
	ciEnum8Slice = 5
	ciEnum6Slice = 6
)

// engines is CE, NVDEC, NVENC, NVJPG, OFA.
type engines [5]int

// giSpec is one row of a geometry table.
type giSpec struct {
	name       string
	enum, id   int
	g          int // compute slices
	memMiB     uint64
	sm         int
	eng        engines
	count      int
	placements []Placement
	src        ProfileSources
}

// run returns placements of the given size starting at each of starts.
func run(size int, starts ...int) []Placement {
	p := make([]Placement, len(starts))
	for i, s := range starts {
		p[i] = Placement{Start: s, Size: size}
	}
	return p
}

// Shorthands for the sources of catalog values.
const (
	rec = SourceRecorded
	doc = SourceDocumented
	inf = SourceInferred
)

// srcs lists the sources of one profile's fields: ID, memory, SMs, copy engines, media engines,
// instance count, placements.
func srcs(id, mem, sm, ce, media, count, pl Source) ProfileSources {
	return ProfileSources{ID: id, Memory: mem, Multiprocessors: sm, CopyEngines: ce, MediaEngines: media, InstanceCount: count, Placements: pl}
}

// Common source patterns (values, so that no table is shared mutable state):
//
//   - recordedAll(): every field printed by nvidia-smi -lgip and -lgipp in a kept recording;
//   - recordedNoPlacements(): a kept -lgip recording, but no -lgipp one;
//   - siblingOnly(): nothing recorded for the model; values from a sibling model, counts from
//     mig-parted and NVIDIA's profile tables.
func recordedAll() ProfileSources          { return srcs(rec, rec, rec, rec, rec, rec, rec) }
func recordedNoPlacements() ProfileSources { return srcs(rec, rec, rec, rec, rec, rec, inf) }
func siblingOnly() ProfileSources          { return srcs(inf, inf, inf, inf, inf, doc, inf) }

// ciPlacementsFor returns the compute-slice starts of a c-slice compute instance inside a g-slice GPU
// instance: aligned to c (to 4 for c=3 inside 7g, as on A100), as many as fit.
func ciPlacementsFor(c, g int) []int {
	if c == g {
		return []int{0}
	}
	step := c
	if c == 3 {
		step = 4
	}
	var out []int
	for s := 0; s+c <= g; s += step {
		out = append(out, s)
	}
	return out
}

// ciEnumFor maps a compute-slice count to its COMPUTE_INSTANCE_PROFILE_* enum.
func ciEnumFor(c int) int {
	switch c {
	case 1:
		return ciEnum1Slice
	case 2:
		return ciEnum2Slice
	case 3:
		return ciEnum3Slice
	case 4:
		return ciEnum4Slice
	case 6:
		return ciEnum6Slice
	case 7:
		return ciEnum7Slice
	case 8:
		return ciEnum8Slice
	}
	return -1
}

// computeProfiles builds the compute-instance profiles of a g-slice GPU instance with giSM SMs.
// smPer gives the SM count of a c-slice compute instance that does not fill the GPU instance.
// CI profile Ids are taken equal to the CI enum (nvidia-smi -lcip shows this on A30 and A100; it is
// inferred for the others). The REV1/NVL CI variants (enums 7 and 8) are left out: they duplicate
// names.
func computeProfiles(g, giSM int, smPer map[int]int) []ComputeProfile {
	var sizes []int
	switch g {
	case 1:
		sizes = []int{1}
	case 2:
		sizes = []int{1, 2}
	case 3:
		sizes = []int{1, 2, 3}
	case 4:
		sizes = []int{1, 2, 4}
	case 7:
		sizes = []int{1, 2, 3, 4, 7}
	default:
		sizes = []int{g}
	}
	out := make([]ComputeProfile, 0, len(sizes))
	for _, c := range sizes {
		sm := smPer[c]
		if c == g {
			sm = giSM
		}
		pl := ciPlacementsFor(c, g)
		e := ciEnumFor(c)
		out = append(out, ComputeProfile{
			Enum: e, ID: e, Slices: c, InstanceCount: len(pl), Multiprocessors: sm, Placements: pl,
		})
	}
	return out
}

// buildProfiles turns table rows into GIProfiles with their compute profiles.
func buildProfiles(rows []giSpec, smPer map[int]int) []GIProfile {
	out := make([]GIProfile, 0, len(rows))
	for _, r := range rows {
		out = append(out, GIProfile{
			Name:            r.name,
			Enum:            r.enum,
			ID:              r.id,
			ComputeSlices:   r.g,
			MemoryMiB:       r.memMiB,
			Multiprocessors: r.sm,
			CopyEngines:     r.eng[0],
			Decoders:        r.eng[1],
			Encoders:        r.eng[2],
			JpegEngines:     r.eng[3],
			OfaEngines:      r.eng[4],
			InstanceCount:   r.count,
			Placements:      r.placements,
			ComputeProfiles: computeProfiles(r.g, r.sm, smPer),
			Sources:         r.src,
		})
	}
	return out
}

// eightSlice describes a part with the A100 geometry: 8 memory slices, 7 compute slices and the
// seven classic profiles (1g, 1g+me, 1g with twice the memory, 2g, 3g, 4g, 7g).
type eightSlice struct {
	names [7]string         // 1g, 1g+me, 1g REV2, 2g, 3g, 4g, 7g
	mem   [4]uint64         // MiB for 1, 2, 4 and 8 memory slices (1g/1g+me, 1g REV2/2g, 3g/4g, 7g)
	sm    [7]int            // per profile, same order as names
	eng   [7]engines        // per profile, same order as names
	src   [7]ProfileSources // per profile, same order as names
}

// NVML profile Ids of the seven classic profiles.
const (
	id1g     = 19
	id1gME   = 20
	id1gRev2 = 15
	id2g     = 14
	id3g     = 9
	id4g     = 5
	id7g     = 0
)

func (e eightSlice) rows() []giSpec {
	return []giSpec{
		{e.names[0], enum1Slice, id1g, 1, e.mem[0], e.sm[0], e.eng[0], 7, run(1, 0, 1, 2, 3, 4, 5, 6), e.src[0]},
		{e.names[1], enum1SliceRev1, id1gME, 1, e.mem[0], e.sm[1], e.eng[1], 1, run(1, 0, 1, 2, 3, 4, 5, 6), e.src[1]},
		{e.names[2], enum1SliceRev2, id1gRev2, 1, e.mem[1], e.sm[2], e.eng[2], 4, run(2, 0, 2, 4, 6), e.src[2]},
		{e.names[3], enum2Slice, id2g, 2, e.mem[1], e.sm[3], e.eng[3], 3, run(2, 0, 2, 4), e.src[3]},
		{e.names[4], enum3Slice, id3g, 3, e.mem[2], e.sm[4], e.eng[4], 2, run(4, 0, 4), e.src[4]},
		{e.names[5], enum4Slice, id4g, 4, e.mem[2], e.sm[5], e.eng[5], 1, run(4, 0), e.src[5]},
		{e.names[6], enum7Slice, id7g, 7, e.mem[3], e.sm[6], e.eng[6], 1, run(8, 0), e.src[6]},
	}
}

// same7 repeats one ProfileSources for the seven classic profiles.
func same7(s ProfileSources) [7]ProfileSources { return [7]ProfileSources{s, s, s, s, s, s, s} }

// smPerSlices is the CI SM map of an eight-slice table: a c-slice compute instance gets the SMs of
// the c-slice GPU instance (1g, 2g, 3g, 4g, 7g).
func (e eightSlice) smPerSlices() map[int]int {
	return map[int]int{1: e.sm[0], 2: e.sm[3], 3: e.sm[4], 4: e.sm[5], 7: e.sm[6]}
}

// eightSliceModel wraps an eight-slice table into a Model.
func eightSliceModel(name string, products []string, pci []uint32, arch, cc string, memMiB uint64, sms int, e eightSlice) *Model {
	return &Model{
		Name: name, ProductNames: products, PCIDeviceIDs: pci, Architecture: arch, CudaComputeCapability: cc,
		MemoryMiB: memMiB, Multiprocessors: sms, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(e.rows(), e.smPerSlices()),
	}
}

// buildCatalog returns a freshly allocated catalog. It is the single source of the built-in tables.
func buildCatalog() []*Model {
	var models []*Model
	models = append(models, ampereModels()...)
	models = append(models, hopperModels()...)
	models = append(models, blackwellModels()...)
	return append(models, rtxPro6000())
}

// Per-architecture SM and engine patterns.
func ampereSM() [7]int { return [7]int{14, 14, 14, 28, 42, 56, 98} }

func ampereEng() [7]engines {
	return [7]engines{
		{1, 0, 0, 0, 0}, // 1g.5gb
		{1, 1, 0, 1, 1}, // 1g.5gb+me
		{1, 1, 0, 0, 0}, // 1g.10gb
		{2, 1, 0, 0, 0}, // 2g.10gb
		{3, 2, 0, 0, 0}, // 3g.20gb
		{4, 2, 0, 0, 0}, // 4g.20gb
		{7, 5, 0, 1, 1}, // 7g.40gb
	}
}

// H100 80GB HBM3 (recorded); the other Hopper parts share the engine pattern.
func hopperSM() [7]int { return [7]int{16, 16, 26, 32, 60, 64, 132} }

func hopperEng() [7]engines {
	return [7]engines{
		{1, 1, 0, 1, 0},
		{1, 1, 0, 1, 1},
		{1, 1, 0, 1, 0},
		{2, 2, 0, 2, 0},
		{3, 3, 0, 3, 0},
		{4, 4, 0, 4, 0},
		{8, 7, 0, 7, 1},
	}
}

func ampereModels() []*Model {
	// A100-SXM4-40GB: -lgip and -lgi from seansiddens/mps-test, -lgipp from the MIG User Guide.
	a100_40 := eightSliceModel("A100-SXM4-40GB", []string{"A100-SXM4-40GB", "A100-PCIE-40GB", "A800 40GB Active"},
		// mig-parted's 40GB filter list (0x20B0 SXM4, 0x20B1 and 0x20F1 PCIe, 0x20F6 A800 40GB Active).
		[]uint32{0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE}, "Ampere", "8.0", 40960, 108, eightSlice{
			names: [7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
			mem:   [4]uint64{4864, 9856, 19968, 40192},
			sm:    ampereSM(), eng: ampereEng(), src: same7(recordedAll()),
		})
	// A100 80GB PCIe: an -lgip recording (driver 515) without 1g.20gb, which arrived in R525; no
	// -lgipp. The SXM4 part has no recording and takes the PCIe values.
	pcieSrc := same7(recordedNoPlacements())
	pcieSrc[2] = siblingOnly()
	a100_80 := eightSlice{
		names: [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		mem:   [4]uint64{9728, 19968, 40192, 80896},
		sm:    ampereSM(), eng: ampereEng(), src: pcieSrc,
	}
	pcie := eightSliceModel("A100 80GB PCIe", []string{"A100 80GB PCIe", "A800 80GB PCIe", "A800 80GB PCIe LC"},
		[]uint32{0x20B510DE, 0x20F510DE}, "Ampere", "8.0", 81920, 108, a100_80)
	a100_80.src = same7(siblingOnly())
	sxm := eightSliceModel("A100-SXM4-80GB", []string{"A100-SXM4-80GB", "A800-SXM4-80GB"},
		[]uint32{0x20B210DE, 0x20F310DE}, "Ampere", "8.0", 81920, 108, a100_80)
	// A30: 4 memory and 4 compute slices; -lgip, -lgipp and -lgi recorded with driver 535.183.01.
	a30 := &Model{
		Name: "A30", ProductNames: []string{"A30", "A30-24GB"},
		PCIDeviceIDs: []uint32{0x20B710DE},
		Architecture: "Ampere", CudaComputeCapability: "8.0",
		MemoryMiB: 24576, Multiprocessors: 56, MemorySlices: 4, ComputeSlices: 4,
		Profiles: buildProfiles([]giSpec{
			{"1g.6gb", enum1Slice, 14, 1, 5952, 14, engines{1, 1, 0, 0, 0}, 4, run(1, 0, 1, 2, 3), recordedAll()},
			{"1g.6gb+me", enum1SliceRev1, 21, 1, 5952, 14, engines{1, 1, 0, 1, 1}, 1, run(1, 0, 1, 2, 3), recordedAll()},
			{"2g.12gb", enum2Slice, 5, 2, 11968, 28, engines{2, 2, 0, 0, 0}, 2, run(2, 0, 2), recordedAll()},
			{"2g.12gb+me", enum2SliceRev1, 6, 2, 11968, 28, engines{2, 2, 0, 1, 1}, 1, run(2, 0, 2), recordedAll()},
			{"4g.24gb", enum4Slice, 0, 4, 24000, 56, engines{4, 4, 0, 1, 1}, 1, run(4, 0), recordedAll()},
		}, map[int]int{1: 14, 2: 28, 4: 56}),
	}
	return []*Model{a100_40, sxm, pcie, a30}
}

func hopperModels() []*Model {
	h100 := eightSliceModel("H100 80GB HBM3", []string{"H100 80GB HBM3", "H100-SXM5-80GB", "H800", "H800 80GB HBM3"},
		[]uint32{0x233010DE, 0x232410DE}, "Hopper", "9.0", 81559, 132, eightSlice{
			names: [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
			mem:   [4]uint64{9984, 20096, 40448, 81152},
			sm:    hopperSM(), eng: hopperEng(), src: same7(recordedAll()),
		})
	// H100 PCIe (114 SMs): -lgip, -lgipp and -lgi recorded with driver 525.125.06 (Scaleway docs).
	h100pcie := eightSliceModel("H100 PCIe", []string{"H100 PCIe", "H800 PCIe"},
		[]uint32{0x233110DE, 0x232210DE}, "Hopper", "9.0", 81559, 114, eightSlice{
			names: [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
			mem:   [4]uint64{9856, 19968, 40192, 80896},
			sm:    [7]int{14, 14, 14, 30, 46, 62, 114}, eng: hopperEng(), src: same7(recordedAll()),
		})
	// H100 NVL 94GB: -lgip and -lgipp recorded with driver 560.35.03.
	nvl := eightSliceModel("H100 NVL", []string{"H100 NVL", "H800 NVL"},
		[]uint32{0x232110DE, 0x233A10DE}, "Hopper", "9.0", 95830, 132, eightSlice{
			names: [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
			mem:   [4]uint64{11008, 22144, 47488, 95360},
			sm:    hopperSM(), eng: hopperEng(), src: same7(recordedAll()),
		})
	// The 96GB Hopper parts share profile names (mig-parted groups 0x2342, 0x233D, 0x20B6, 0x2329);
	// no recording: memory scaled, Ids and geometry from H100.
	h96 := eightSlice{
		names: [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
		mem:   [4]uint64{12032, 24192, 48640, 97280},
		sm:    hopperSM(), eng: hopperEng(), src: same7(siblingOnly()),
	}
	h96m := eightSliceModel("H100 96GB", []string{"H100 96GB", "H100 96GB HBM3", "PG506-96GB"},
		[]uint32{0x233D10DE, 0x20B610DE}, "Hopper", "9.0", 97871, 132, h96)
	gh96 := eightSliceModel("GH200 96GB", []string{"GH200 96GB", "GH200 480GB", "GH200 96GB HBM3"},
		[]uint32{0x234210DE}, "Hopper", "9.0", 97871, 132, h96)
	// H20 has 78 SMs; per-profile SMs are guesses proportional to the compute slices.
	h20 := h96
	h20.sm = [7]int{10, 10, 10, 20, 30, 40, 78}
	h20m := eightSliceModel("H20", []string{"H20"}, []uint32{0x232910DE}, "Hopper", "9.0", 97871, 78, h20)
	return append([]*Model{h100, h100pcie, nvl, h96m, gh96, h20m}, h200Models()...)
}

func h200Models() []*Model {
	// H200 141GB: -lgip recorded (NVIDIA/mig-parted#120); no -lgipp.
	h200 := eightSlice{
		names: [7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		mem:   [4]uint64{16384, 33024, 71168, 143104},
		sm:    hopperSM(), eng: hopperEng(), src: same7(recordedNoPlacements()),
	}
	sxm := eightSliceModel("H200", []string{"H200", "H200-SXM5-141GB"}, []uint32{0x233510DE}, "Hopper", "9.0", 143771, 132, h200)
	h200.src = same7(siblingOnly())
	nvl := eightSliceModel("H200 NVL", []string{"H200 NVL"}, []uint32{0x233B10DE}, "Hopper", "9.0", 143771, 132, h200)
	// GH200 144G HBM3e: the first four -lgip rows recorded (NVIDIA/mig-parted#139); 3g/4g/7g
	// inferred (memory scaled, SMs and engines from H100).
	src := [7]ProfileSources{recordedNoPlacements(), recordedNoPlacements(), recordedNoPlacements(), recordedNoPlacements(), siblingOnly(), siblingOnly(), siblingOnly()}
	gh := eightSliceModel("GH200 144G HBM3e", []string{"GH200 144G HBM3e"}, []uint32{0x234810DE}, "Hopper", "9.0", 147200, 132, eightSlice{
		names: [7]string{"1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"},
		mem:   [4]uint64{17920, 36096, 72704, 146432},
		sm:    hopperSM(), eng: hopperEng(), src: src,
	})
	return []*Model{sxm, nvl, gh}
}

func blackwellModels() []*Model {
	// B200 and GB200: the first -lgip rows are recorded (1g, 1g+me, the 1g with twice the memory,
	// and on B200 2g); 3g/4g/7g copy engines from the MIG User Guide's B200 table; the remaining SM
	// counts, memory and media engines are inferred.
	bEng := [7]engines{
		{2, 1, 0, 1, 0}, {2, 1, 0, 1, 1}, {2, 1, 0, 1, 0}, {4, 2, 0, 2, 0},
		{6, 3, 0, 3, 0}, {8, 4, 0, 4, 0}, {16, 7, 0, 7, 1},
	}
	upper := srcs(inf, inf, inf, doc, inf, doc, inf) // 3g, 4g, 7g
	b200 := eightSliceModel("B200", []string{"B200"}, []uint32{0x290110DE}, "Blackwell", "10.0", 183359, 148, eightSlice{
		names: [7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
		mem:   [4]uint64{20992, 45312, 91392, 182784},
		sm:    [7]int{18, 18, 30, 36, 60, 64, 148}, eng: bEng,
		src: [7]ProfileSources{recordedNoPlacements(), recordedNoPlacements(), recordedNoPlacements(), recordedNoPlacements(), upper, upper, upper},
	})
	// GB200: the 2g.47gb row is documented (mig-parted#227 and gpu-operator#1303 show it, the kept
	// recording lacks its second line). SMs UNVERIFIED for the whole GPU.
	twoG := srcs(doc, doc, doc, doc, doc, doc, inf)
	gb200 := eightSliceModel("GB200", []string{"GB200"}, []uint32{0x294110DE}, "Blackwell", "10.0", 189471, 152, eightSlice{
		names: [7]string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"},
		mem:   [4]uint64{22528, 46592, 94464, 188672},
		sm:    [7]int{18, 18, 32, 38, 60, 64, 152}, eng: bEng,
		src: [7]ProfileSources{recordedNoPlacements(), recordedNoPlacements(), recordedNoPlacements(), twoG, upper, upper, upper},
	})
	return []*Model{b200, gb200}
}

// rtxPro6000 is the RTX PRO 6000 Blackwell: 4 compute slices, and placements counted in 12 units
// (1g takes 3, 2g 6, 4g 12), as -lgipp prints them. Everything is recorded (driver 610.43.02)
// except the enum of 1g.24gb+me, which nvidia-smi does not print (1_SLICE_REV1 inferred).
func rtxPro6000() *Model {
	q, h, f := run(3, 0, 3, 6, 9), run(6, 0, 6), run(12, 0)
	return &Model{
		Name: "RTX PRO 6000 Blackwell",
		ProductNames: []string{
			"RTX PRO 6000 Blackwell Server Edition",
			"RTX PRO 6000 Blackwell Workstation Edition",
			"RTX PRO 6000 Blackwell Max-Q Workstation Edition",
		},
		PCIDeviceIDs: []uint32{0x2BB510DE, 0x2BB110DE, 0x2BB410DE}, // 0x2BB1/0x2BB4 UNVERIFIED
		Architecture: "Blackwell", CudaComputeCapability: "12.0",
		MemoryMiB: 97887, Multiprocessors: 188, MemorySlices: 12, ComputeSlices: 4,
		Profiles: buildProfiles([]giSpec{
			{"1g.24gb", enum1Slice, 14, 1, 24192, 46, engines{1, 1, 1, 1, 0}, 4, q, recordedAll()},
			{"1g.24gb+me", enum1SliceRev1, 21, 1, 24192, 46, engines{1, 1, 1, 1, 1}, 1, q, recordedAll()},
			{"1g.24gb+gfx", enum1SliceGfx, 47, 1, 24192, 46, engines{1, 1, 1, 1, 0}, 4, q, recordedAll()},
			{"1g.24gb+me.all", enum1SliceAllME, 65, 1, 24192, 46, engines{1, 4, 4, 4, 1}, 1, q, recordedAll()},
			{"1g.24gb-me", enum1SliceNoME, 67, 1, 24192, 46, engines{1, 0, 0, 0, 0}, 4, q, recordedAll()},
			{"2g.48gb", enum2Slice, 5, 2, 48512, 94, engines{2, 2, 2, 2, 0}, 2, h, recordedAll()},
			{"2g.48gb+gfx", enum2SliceGfx, 35, 2, 48512, 94, engines{2, 2, 2, 2, 0}, 2, h, recordedAll()},
			{"2g.48gb+me.all", enum2SliceAllME, 64, 2, 48512, 94, engines{2, 4, 4, 4, 1}, 1, h, recordedAll()},
			{"2g.48gb-me", enum2SliceNoME, 66, 2, 48512, 94, engines{2, 0, 0, 0, 0}, 2, h, recordedAll()},
			{"4g.96gb", enum4Slice, 0, 4, 97408, 188, engines{4, 4, 4, 4, 1}, 1, f, recordedAll()},
			{"4g.96gb+gfx", enum4SliceGfx, 32, 4, 97408, 188, engines{4, 4, 4, 4, 1}, 1, f, recordedAll()},
		}, map[int]int{1: 46, 2: 94, 4: 188}),
	}
}
