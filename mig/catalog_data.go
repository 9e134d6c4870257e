package mig

// This file holds the built-in geometry tables. Sources (facts only, see
// research/mig-cdi.md §1.3–§1.7):
//
//   - A100-40GB: go-nvml's dgxa100 mock profile table, which agrees with the NVIDIA MIG user guide
//     (supported-mig-profiles.html) and with nvidia-smi mig -lgip transcripts (4.75/9.62/19.50/39.25 GiB).
//   - Profile Ids 19/20/15/14/9/5/0 for 1g/1g+me/1g REV2/2g/3g/4g/7g: nvidia-smi mig -lgip on A100 and
//     H100 80GB. They are assumed (not verified) for the other 8-slice parts.
//   - H100 80GB HBM3: a published nvidia-smi mig -lgip listing (SMs 16/16/26/32/60/64/132, memory
//     9.75/19.62/39.50/79.25 GiB, 7g has 8 copy engines, 7 NVDEC, 7 NVJPG and 1 OFA).
//   - Names, instance counts and PCI ids of the Hopper/Blackwell parts: mig-parted's built-in config.
//   - Placements of the 8-slice parts follow the A100 geometry (3g has size 4, 7g size 8). NVIDIA's DRA
//     driver states this for B200 (3g.90gb uses 4 of 8 memory slices); go-nvml's Hopper/Blackwell mocks
//     contradict it and are deliberately not used.
//
// Values marked UNVERIFIED were not confirmed on hardware; ModelFromDevice reads the real ones and
// Compare reports any difference.

// NVML GPU_INSTANCE_PROFILE_* enum values (nvml.h). They are repeated here so that the catalog does
// not depend on a particular go-nvml version's constant set.
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
	// giEnumCount is GPU_INSTANCE_PROFILE_COUNT in go-nvml >= v0.13.3.
	giEnumCount = 18
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
}

// run returns placements of the given size starting at each of starts.
func run(size int, starts ...int) []Placement {
	p := make([]Placement, len(starts))
	for i, s := range starts {
		p[i] = Placement{Start: s, Size: size}
	}
	return p
}

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
// CI profile Ids are taken equal to the CI enum (observed on hardware for some profiles; UNVERIFIED in
// general). The REV1/NVL CI variants (enums 7 and 8) are left out: they duplicate names.
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
		})
	}
	return out
}

// eightSlice describes a part with the A100 geometry: 8 memory slices, 7 compute slices and the
// seven classic profiles (1g, 1g+me, 1g with twice the memory, 2g, 3g, 4g, 7g).
type eightSlice struct {
	names [7]string  // 1g, 1g+me, 1g REV2, 2g, 3g, 4g, 7g
	mem   [4]uint64  // MiB for 1, 2, 4 and 8 memory slices (1g/1g+me, 1g REV2/2g, 3g/4g, 7g)
	sm    [7]int     // per profile, same order as names
	eng   [7]engines // per profile, same order as names
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
		{e.names[0], enum1Slice, id1g, 1, e.mem[0], e.sm[0], e.eng[0], 7, run(1, 0, 1, 2, 3, 4, 5, 6)},
		{e.names[1], enum1SliceRev1, id1gME, 1, e.mem[0], e.sm[1], e.eng[1], 1, run(1, 0, 1, 2, 3, 4, 5, 6)},
		{e.names[2], enum1SliceRev2, id1gRev2, 1, e.mem[1], e.sm[2], e.eng[2], 4, run(2, 0, 2, 4, 6)},
		{e.names[3], enum2Slice, id2g, 2, e.mem[1], e.sm[3], e.eng[3], 3, run(2, 0, 2, 4)},
		{e.names[4], enum3Slice, id3g, 3, e.mem[2], e.sm[4], e.eng[4], 2, run(4, 0, 4)},
		{e.names[5], enum4Slice, id4g, 4, e.mem[2], e.sm[5], e.eng[5], 1, run(4, 0)},
		{e.names[6], enum7Slice, id7g, 7, e.mem[3], e.sm[6], e.eng[6], 1, run(8, 0)},
	}
}

// buildCatalog returns a freshly allocated catalog. It is the single source of the built-in tables.
func buildCatalog() []*Model {
	var models []*Model
	add := func(m *Model) { models = append(models, m) }

	// Per-architecture SM and engine patterns.
	ampereSM := [7]int{14, 14, 14, 28, 42, 56, 98}
	ampereEng := [7]engines{
		{1, 0, 0, 0, 0}, // 1g.5gb
		{1, 1, 0, 1, 1}, // 1g.5gb+me
		{1, 1, 0, 0, 0}, // 1g.10gb
		{2, 1, 0, 0, 0}, // 2g.10gb
		{3, 2, 0, 0, 0}, // 3g.20gb
		{4, 2, 0, 0, 0}, // 4g.20gb
		{7, 5, 0, 1, 1}, // 7g.40gb
	}
	ampereCISM := map[int]int{1: 14, 2: 28, 3: 42, 4: 56, 7: 98}

	// H100 80GB HBM3 (nvidia-smi listing). Other Hopper and Blackwell parts reuse it: UNVERIFIED.
	hopperSM := [7]int{16, 16, 26, 32, 60, 64, 132}
	hopperEng := [7]engines{
		{1, 1, 0, 1, 0},
		{1, 1, 0, 1, 1},
		{1, 1, 0, 1, 0},
		{2, 2, 0, 2, 0},
		{3, 3, 0, 3, 0},
		{4, 4, 0, 4, 0},
		{8, 7, 0, 7, 1},
	}
	hopperCISM := map[int]int{1: 16, 2: 32, 3: 60, 4: 64, 7: 132}

	// --- Ampere ---------------------------------------------------------------------------------
	a100_40 := eightSlice{
		names: [7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		mem:   [4]uint64{4864, 9856, 19968, 40192},
		sm:    ampereSM, eng: ampereEng,
	}
	add(&Model{
		Name:         "A100-SXM4-40GB",
		ProductNames: []string{"A100-SXM4-40GB", "A100-PCIE-40GB"},
		// mig-parted's 40GB filter list (0x20B0 SXM4, 0x20B1 and 0x20F1 PCIe, 0x20F6 A800-40GB).
		PCIDeviceIDs: []uint32{0x20B010DE, 0x20B110DE, 0x20F110DE, 0x20F610DE},
		Architecture: "Ampere", CudaComputeCapability: "8.0",
		MemoryMiB: 40960, Multiprocessors: 108, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(a100_40.rows(), ampereCISM),
	})
	// A100 80GB: memory from nvidia-smi's GiB column (9.50/19.50/39.25/78.75 GiB); go-nvml's mock has
	// 9856/19968/40192/80384 MiB instead. UNVERIFIED.
	a100_80 := eightSlice{
		names: [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		mem:   [4]uint64{9728, 19968, 40192, 80640},
		sm:    ampereSM, eng: ampereEng,
	}
	add(&Model{
		Name: "A100-SXM4-80GB", ProductNames: []string{"A100-SXM4-80GB"},
		PCIDeviceIDs: []uint32{0x20B210DE},
		Architecture: "Ampere", CudaComputeCapability: "8.0",
		MemoryMiB: 81920, Multiprocessors: 108, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(a100_80.rows(), ampereCISM),
	})
	add(&Model{
		Name: "A100 80GB PCIe", ProductNames: []string{"A100 80GB PCIe"},
		PCIDeviceIDs: []uint32{0x20B510DE},
		Architecture: "Ampere", CudaComputeCapability: "8.0",
		MemoryMiB: 81920, Multiprocessors: 108, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(a100_80.rows(), ampereCISM),
	})
	// A30: 4 memory and 4 compute slices. Engines and counts from NVIDIA's profile table. Ids 14
	// (1g.6gb) and 21 (1g.6gb+me) from the research; 5, 6 and 0 for 2g, 2g+me and 4g are from memory of
	// nvidia-smi output: UNVERIFIED. Memory from nvidia-smi's GiB column (about 5.81/11.75/23.62): UNVERIFIED.
	a30CISM := map[int]int{1: 14, 2: 28, 4: 56}
	add(&Model{
		Name: "A30", ProductNames: []string{"A30", "A30-24GB"},
		PCIDeviceIDs: []uint32{0x20B710DE},
		Architecture: "Ampere", CudaComputeCapability: "8.0",
		MemoryMiB: 24576, Multiprocessors: 56, MemorySlices: 4, ComputeSlices: 4,
		Profiles: buildProfiles([]giSpec{
			{"1g.6gb", enum1Slice, 14, 1, 5952, 14, engines{1, 0, 0, 0, 0}, 4, run(1, 0, 1, 2, 3)},
			{"1g.6gb+me", enum1SliceRev1, 21, 1, 5952, 14, engines{1, 1, 0, 1, 1}, 1, run(1, 0, 1, 2, 3)},
			{"2g.12gb", enum2Slice, 5, 2, 12032, 28, engines{2, 2, 0, 0, 0}, 2, run(2, 0, 2)},
			{"2g.12gb+me", enum2SliceRev1, 6, 2, 12032, 28, engines{2, 2, 0, 1, 1}, 1, run(2, 0, 2)},
			{"4g.24gb", enum4Slice, 0, 4, 24192, 56, engines{4, 4, 0, 1, 1}, 1, run(4, 0)},
		}, a30CISM),
	})

	// --- Hopper ---------------------------------------------------------------------------------
	h100 := eightSlice{
		names: [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		mem:   [4]uint64{9984, 20096, 40448, 81152},
		sm:    hopperSM, eng: hopperEng,
	}
	add(&Model{
		Name: "H100 80GB HBM3", ProductNames: []string{"H100 80GB HBM3", "H100-SXM5-80GB"},
		PCIDeviceIDs: []uint32{0x233010DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 81559, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h100.rows(), hopperCISM),
	})
	// H100 PCIe has 114 SMs; the per-profile SM counts below are UNVERIFIED (read them from NVML).
	h100pcie := h100
	h100pcie.sm = [7]int{14, 14, 14, 28, 42, 56, 114}
	add(&Model{
		Name: "H100 PCIe", ProductNames: []string{"H100 PCIe"},
		PCIDeviceIDs: []uint32{0x233110DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 81559, Multiprocessors: 114, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h100pcie.rows(), map[int]int{1: 14, 2: 28, 3: 42, 4: 56, 7: 114}),
	})
	// H100 NVL 94GB: memory scaled from H100 80GB, UNVERIFIED.
	add(&Model{
		Name: "H100 NVL", ProductNames: []string{"H100 NVL"},
		PCIDeviceIDs: []uint32{0x232110DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 95830, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(eightSlice{
			names: [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
			mem:   [4]uint64{11776, 23552, 47488, 95232},
			sm:    hopperSM, eng: hopperEng,
		}.rows(), hopperCISM),
	})
	// The 96GB Hopper parts share profile names (mig-parted groups 0x2342, 0x233D, 0x20B6, 0x2329).
	// Memory UNVERIFIED.
	h96 := eightSlice{
		names: [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"},
		mem:   [4]uint64{12032, 24192, 48640, 97280},
		sm:    hopperSM, eng: hopperEng,
	}
	add(&Model{
		Name: "H100 96GB", ProductNames: []string{"H100 96GB", "H100 96GB HBM3", "PG506-96GB"},
		PCIDeviceIDs: []uint32{0x233D10DE, 0x20B610DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 97871, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h96.rows(), hopperCISM),
	})
	add(&Model{
		Name: "GH200 96GB", ProductNames: []string{"GH200 96GB", "GH200 480GB", "GH200 96GB HBM3"},
		PCIDeviceIDs: []uint32{0x234210DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 97871, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h96.rows(), hopperCISM),
	})
	// H20 has 78 SMs; per-profile SMs are UNVERIFIED guesses proportional to the compute slices.
	h20 := h96
	h20.sm = [7]int{10, 10, 10, 20, 30, 40, 78}
	add(&Model{
		Name: "H20", ProductNames: []string{"H20"},
		PCIDeviceIDs: []uint32{0x232910DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 97871, Multiprocessors: 78, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h20.rows(), map[int]int{1: 10, 2: 20, 3: 30, 4: 40, 7: 78}),
	})
	// H200 141GB: memory UNVERIFIED (chosen within the eighth that gives each documented name).
	h200 := eightSlice{
		names: [7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		mem:   [4]uint64{17664, 35456, 71296, 143104},
		sm:    hopperSM, eng: hopperEng,
	}
	add(&Model{
		Name: "H200", ProductNames: []string{"H200", "H200-SXM5-141GB"},
		PCIDeviceIDs: []uint32{0x233510DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 143771, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h200.rows(), hopperCISM),
	})
	add(&Model{
		Name: "H200 NVL", ProductNames: []string{"H200 NVL"},
		PCIDeviceIDs: []uint32{0x233B10DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 143771, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(h200.rows(), hopperCISM),
	})
	// GH200 144G HBM3e: memory UNVERIFIED.
	add(&Model{
		Name: "GH200 144G HBM3e", ProductNames: []string{"GH200 144G HBM3e"},
		PCIDeviceIDs: []uint32{0x234810DE},
		Architecture: "Hopper", CudaComputeCapability: "9.0",
		MemoryMiB: 147200, Multiprocessors: 132, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(eightSlice{
			names: [7]string{"1g.18gb", "1g.18gb+me", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb"},
			mem:   [4]uint64{18176, 36352, 72704, 146432},
			sm:    hopperSM, eng: hopperEng,
		}.rows(), hopperCISM),
	})

	// --- Blackwell ------------------------------------------------------------------------------
	// SM counts and engines of B200/GB200 profiles are UNVERIFIED (Hopper pattern with the whole-GPU
	// SM count for 7g); memory UNVERIFIED, chosen within the eighth that gives each documented name.
	bSM := func(total int) [7]int { return [7]int{16, 16, 16, 32, 60, 64, total} }
	add(&Model{
		Name: "B200", ProductNames: []string{"B200"},
		PCIDeviceIDs: []uint32{0x290110DE},
		Architecture: "Blackwell", CudaComputeCapability: "10.0",
		MemoryMiB: 183359, Multiprocessors: 148, MemorySlices: 8, ComputeSlices: 7,
		Profiles: buildProfiles(eightSlice{
			names: [7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
			mem:   [4]uint64{22784, 45312, 91392, 182784},
			sm:    bSM(148), eng: hopperEng,
		}.rows(), map[int]int{1: 16, 2: 32, 3: 60, 4: 64, 7: 148}),
	})
	add(&Model{
		Name: "GB200", ProductNames: []string{"GB200"},
		PCIDeviceIDs: []uint32{0x294110DE},
		Architecture: "Blackwell", CudaComputeCapability: "10.0",
		MemoryMiB: 189471, Multiprocessors: 152, MemorySlices: 8, ComputeSlices: 7, // SMs UNVERIFIED
		Profiles: buildProfiles(eightSlice{
			names: [7]string{"1g.23gb", "1g.23gb+me", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb"},
			mem:   [4]uint64{23296, 47104, 94464, 188672},
			sm:    bSM(152), eng: hopperEng,
		}.rows(), map[int]int{1: 16, 2: 32, 3: 60, 4: 64, 7: 152}),
	})
	// RTX PRO 6000 Blackwell: 4 memory and 4 compute slices, names and counts from mig-parted.
	// Profile Ids: the base profiles reuse the A30 numbering (14/5/0) and +me.all the A30 +me Ids
	// (21/6): UNVERIFIED. The +gfx and -me Ids are NOT KNOWN; 100+enum is a placeholder that no
	// NVML driver reports, so ModelFromDevice/Compare will show the real value. SMs, memory and
	// engines UNVERIFIED.
	rtxCISM := map[int]int{1: 47, 2: 94, 4: 188}
	add(&Model{
		Name: "RTX PRO 6000 Blackwell",
		ProductNames: []string{
			"RTX PRO 6000 Blackwell Server Edition",
			"RTX PRO 6000 Blackwell Workstation Edition",
			"RTX PRO 6000 Blackwell Max-Q Workstation Edition",
		},
		PCIDeviceIDs: []uint32{0x2BB510DE, 0x2BB110DE, 0x2BB410DE}, // 0x2BB1/0x2BB4 UNVERIFIED
		Architecture: "Blackwell", CudaComputeCapability: "12.0",
		MemoryMiB: 97887, Multiprocessors: 188, MemorySlices: 4, ComputeSlices: 4,
		Profiles: buildProfiles([]giSpec{
			{"1g.24gb", enum1Slice, 14, 1, 24064, 47, engines{1, 1, 1, 1, 0}, 4, run(1, 0, 1, 2, 3)},
			{"1g.24gb+gfx", enum1SliceGfx, 100 + enum1SliceGfx, 1, 24064, 47, engines{1, 1, 1, 1, 0}, 4, run(1, 0, 1, 2, 3)},
			{"1g.24gb-me", enum1SliceNoME, 100 + enum1SliceNoME, 1, 24064, 47, engines{1, 0, 0, 0, 0}, 4, run(1, 0, 1, 2, 3)},
			{"1g.24gb+me.all", enum1SliceAllME, 21, 1, 24064, 47, engines{1, 4, 4, 4, 1}, 1, run(1, 0, 1, 2, 3)},
			{"2g.48gb", enum2Slice, 5, 2, 48384, 94, engines{2, 2, 2, 2, 0}, 2, run(2, 0, 2)},
			{"2g.48gb+gfx", enum2SliceGfx, 100 + enum2SliceGfx, 2, 48384, 94, engines{2, 2, 2, 2, 0}, 2, run(2, 0, 2)},
			{"2g.48gb-me", enum2SliceNoME, 100 + enum2SliceNoME, 2, 48384, 94, engines{2, 0, 0, 0, 0}, 2, run(2, 0, 2)},
			{"2g.48gb+me.all", enum2SliceAllME, 6, 2, 48384, 94, engines{2, 4, 4, 4, 1}, 1, run(2, 0, 2)},
			{"4g.96gb", enum4Slice, 0, 4, 96768, 188, engines{4, 4, 4, 4, 1}, 1, run(4, 0)},
			{"4g.96gb+gfx", enum4SliceGfx, 100 + enum4SliceGfx, 4, 96768, 188, engines{4, 4, 4, 4, 1}, 1, run(4, 0)},
		}, rtxCISM),
	})
	return models
}
