package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpudra/gpudra/internal/atomicfile"
)

// clock is a deterministic, concurrency-safe time source advancing one second per call.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func open(t testing.TB, dir string, opts ...Option) (*Store, LoadReport) {
	t.Helper()
	all := append([]Option{WithBootID("boot-a"), WithLogger(ktesting.NewLogger(t, ktesting.NewConfig()))}, opts...)
	s, rep, err := Open(dir, all...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s, rep
}

func claim(uid string) ClaimState {
	return ClaimState{
		UID: uid, Namespace: "ns", Name: "claim-" + uid, Phase: PrepareCompleted,
		Devices: []PreparedDevice{{
			Request: "gpu", Pool: "node-a", Device: "gpu-0",
			CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + uid + "-gpu-0"},
			GPUUUID:      "GPU-0",
		}},
	}
}

func migClaim(uid string) ClaimState {
	c := claim(uid)
	c.Devices = append(c.Devices, PreparedDevice{
		Request: "mig", Pool: "node-a", Device: "gpu-1-mig-1g5gb-2",
		CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + uid + "-gpu-1-mig-1g5gb-2"},
		GPUUUID:      "GPU-1",
		MIG: &MIGInstance{ParentUUID: "GPU-1", Profile: "1g.5gb", GIProfileID: 19, CIProfileID: 0,
			Placement: Placement{Start: 2, Size: 1}, GIID: 9, CIID: 0, UUID: "MIG-x", Created: true},
		Sharing: json.RawMessage(`{"strategy":"TimeSlicing","interval":"Long","applied":true}`),
	})
	return c
}

// claims returns the store's claims as a map, for diffs against expectations.
func claims(s *Store) map[string]ClaimState {
	out := map[string]ClaimState{}
	for _, c := range s.List() {
		out[c.UID] = c
	}
	return out
}

// ignoreStamps drops the fields Store stamps, for comparing against caller input.
var ignoreStamps = cmp.FilterPath(func(p cmp.Path) bool {
	n := p.Last().String()
	return n == ".BootID" || n == ".UpdatedAt"
}, cmp.Ignore())

func TestRoundTrip(t *testing.T) {
	spaced := migClaim("c-spaced")
	spaced.Devices[1].Sharing = json.RawMessage("{ \"strategy\" :\n \"MPS\" }")
	empty := claim("c-empty")
	empty.Devices = []PreparedDevice{{Device: "gpu-2", CDIDeviceIDs: []string{}, Sharing: json.RawMessage("null")}}
	noDevices := ClaimState{UID: "c-none", Phase: PrepareStarted, Devices: []PreparedDevice{}}

	for _, tc := range []struct {
		name string
		put  []ClaimState
	}{
		{"empty", nil},
		{"one", []ClaimState{claim("c1")}},
		{"mig and sharing", []ClaimState{migClaim("c1"), claim("c2")}},
		{"all phases", []ClaimState{
			func() ClaimState { c := claim("p1"); c.Phase = PrepareStarted; return c }(),
			func() ClaimState { c := claim("p2"); c.Phase = UnprepareStarted; return c }(),
			claim("p3"),
		}},
		// Forms that encode to the same JSON as a normal form must read back identically from
		// memory and from disk.
		{"normalized forms", []ClaimState{spaced, empty, noDevices}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, rep := open(t, dir, WithClock(newClock().now))
			if !rep.Fresh || rep.Corrupt || rep.Rebooted {
				t.Errorf("fresh Open report = %+v", rep)
			}
			for _, c := range tc.put {
				if err := s.Put(c, atomicfile.ProcessCrash); err != nil {
					t.Fatalf("Put(%s): %v", c.UID, err)
				}
			}
			inMemory := claims(s)
			for _, c := range tc.put {
				got, ok := s.Get(c.UID)
				if !ok {
					t.Fatalf("Get(%s) not found", c.UID)
				}
				if got.BootID != "boot-a" || got.UpdatedAt.IsZero() {
					t.Errorf("Get(%s) stamps = %q %v, want boot-a and a time", c.UID, got.BootID, got.UpdatedAt)
				}
			}
			s2, rep2 := open(t, dir)
			// Open writes the empty state of a fresh directory, so a reopen is never fresh.
			if rep2.Fresh || rep2.Corrupt || rep2.Rebooted || rep2.Migrated != 0 {
				t.Errorf("reopen report = %+v", rep2)
			}
			if diff := cmp.Diff(inMemory, claims(s2)); diff != "" {
				t.Errorf("reopened state differs from the state before (-before +reopened):\n%s", diff)
			}
			if len(tc.put) > 0 && tc.name != "normalized forms" {
				want := map[string]ClaimState{}
				for _, c := range tc.put {
					want[c.UID] = c
				}
				if diff := cmp.Diff(want, claims(s2), ignoreStamps); diff != "" {
					t.Errorf("reopened state (-put +got):\n%s", diff)
				}
			}
		})
	}
}

// TestEncodeMatchesMarshal checks that the cached, hand-assembled encoding is exactly what
// json.Marshal produces, including for keys that need escaping, and with a partly filled cache.
func TestEncodeMatchesMarshal(t *testing.T) {
	st := State{Claims: map[string]ClaimState{}}
	for _, uid := range []string{"b", "a", "<&>", "\u00e9t\u00e9", `q"uote`, "a\\b", "Z", "\u2028"} {
		c := migClaim(uid)
		c.UpdatedAt = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		st.Claims[uid] = c
	}
	want, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, cached := range []map[string][]byte{{}, {"a": mustMarshal(t, st.Claims["a"])}} {
		got, err := encodeCached(st, cached, "boot")
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		if err := json.Unmarshal(got, &env); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(env.Data)); diff != "" {
			t.Errorf("data (-json.Marshal +encodeCached):\n%s", diff)
		}
		if d, err := decode("test", got); err != nil || len(d.state.Claims) != len(st.Claims) {
			t.Errorf("decode of encoded state: %v", err)
		}
	}
	if got, _ := encode(State{}, "b"); !bytes.Contains(got, []byte(`"data":{"claims":{}}`)) {
		t.Errorf("empty state encodes as %s", got)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenV2(t *testing.T) {
	dir := t.TempDir()
	golden, err := os.ReadFile("testdata/v2.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), golden, 0o600); err != nil {
		t.Fatal(err)
	}
	s, rep := open(t, dir)
	want := map[string]ClaimState{
		"1111aaaa-0000-4000-8000-000000000001": {
			UID: "1111aaaa-0000-4000-8000-000000000001", Namespace: "ml", Name: "mig-dyn", Phase: PrepareCompleted,
			Devices: []PreparedDevice{{
				Request: "mig", Pool: "node-a", Device: "gpu-0-mig-1g5gb-3",
				CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=1111aaaa-0000-4000-8000-000000000001-gpu-0-mig-1g5gb-3"},
				GPUUUID:      "GPU-aaaaaaaa-1111-2222-3333-444444444444",
				MIG: &MIGInstance{ParentUUID: "GPU-aaaaaaaa-1111-2222-3333-444444444444", Profile: "1g.5gb",
					GIProfileID: 19, Placement: Placement{Start: 3, Size: 1}, GIID: 13, CIID: 0,
					UUID: "MIG-bbbbbbbb-1111-2222-3333-444444444444", Created: true},
				Sharing: json.RawMessage(`{"strategy":"MPS","pipeDir":"/run/mps/x"}`),
			}},
			BootID: "boot-golden", UpdatedAt: time.Date(2026, 7, 1, 12, 0, 0, 123456789, time.UTC),
		},
		"2222bbbb-0000-4000-8000-000000000002": {
			UID: "2222bbbb-0000-4000-8000-000000000002", Namespace: "default", Name: "half-done", Phase: PrepareStarted,
			Devices: []PreparedDevice{{Request: "gpu", Pool: "node-a", Device: "gpu-1",
				GPUUUID: "GPU-cccccccc-1111-2222-3333-444444444444"}},
			BootID: "boot-golden", UpdatedAt: time.Date(2026, 7, 1, 12, 0, 1, 0, time.UTC),
		},
	}
	if diff := cmp.Diff(want, claims(s)); diff != "" {
		t.Errorf("golden v2 (-want +got):\n%s", diff)
	}
	wantRep := LoadReport{Path: filepath.Join(dir, FileName), Rebooted: true, PreviousBootID: "boot-golden", BootID: "boot-a"}
	if diff := cmp.Diff(wantRep, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	// Loading must not rewrite a current-version file.
	after, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !bytes.Equal(golden, after) {
		t.Error("Open rewrote a current-version checkpoint")
	}
}

func TestMigrateV1(t *testing.T) {
	dir := t.TempDir()
	golden, err := os.ReadFile("testdata/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, golden, 0o600); err != nil {
		t.Fatal(err)
	}
	s, rep := open(t, dir)
	const u1, u2 = "0b7c1e52-5f3a-4d6e-9c1a-3e2f4a5b6c7d", "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
	want := map[string]ClaimState{
		u1: {UID: u1, Namespace: "ml", Name: "train-gpus", Phase: PrepareCompleted, Devices: []PreparedDevice{
			{Device: "gpu-0", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + u1 + "-gpu-0"}},
			{Device: "gpu-1", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + u1 + "-gpu-1"}},
		}},
		u2: {UID: u2, Namespace: "default", Name: "notebook-mig", Phase: PrepareCompleted, Devices: []PreparedDevice{
			{Device: "gpu-3-mig-1g5gb-0", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=" + u2 + "-gpu-3-mig-1g5gb-0"}},
		}},
	}
	if diff := cmp.Diff(want, claims(s)); diff != "" {
		t.Errorf("migrated state (-want +got):\n%s", diff)
	}
	wantRep := LoadReport{Path: path, Migrated: 1, MigrationBackup: path + ".v1", BootID: "boot-a"}
	if diff := cmp.Diff(wantRep, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	backup, err := os.ReadFile(path + ".v1")
	if err != nil || !bytes.Equal(backup, golden) {
		t.Errorf("v1 backup not byte-identical to the original (err %v)", err)
	}
	var env envelope
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &env); err != nil || env.Version != CurrentVersion || env.BootID != "boot-a" {
		t.Errorf("checkpoint after migration: version %d bootID %q err %v, want version %d", env.Version, env.BootID, err, CurrentVersion)
	}
	// The rewritten file opens as current without another migration.
	s2, rep2 := open(t, dir)
	if rep2.Migrated != 0 || rep2.Corrupt {
		t.Errorf("second Open report = %+v", rep2)
	}
	if diff := cmp.Diff(claims(s), claims(s2)); diff != "" {
		t.Errorf("state after reopen (-first +second):\n%s", diff)
	}
}

func TestMigrateV1Invalid(t *testing.T) {
	dir := t.TempDir()
	writeEnvelope(t, filepath.Join(dir, FileName), 1, "",
		`{"preparedClaims":{"u":{"namespace":"n","name":"c","devices":["gpu-0","gpu-1"],"cdiDeviceIDs":["x"]}}}`)
	_, rep := open(t, dir)
	if !rep.Corrupt || !strings.Contains(fmt.Sprint(rep.Reason), `preparedClaims["u"]: 2 devices but 1 cdiDeviceIDs`) {
		t.Errorf("report = %+v, want corrupt naming the claim", rep)
	}
}

// writeEnvelope writes a checkpoint with a correct checksum around arbitrary data.
func writeEnvelope(t *testing.T, path string, version int, bootID, data string) []byte {
	t.Helper()
	sum, err := checksum([]byte(data))
	if err != nil {
		t.Fatalf("checksum of test data: %v", err)
	}
	b, err := json.Marshal(envelope{Version: version, BootID: bootID, Checksum: sum, Data: json.RawMessage(data)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFutureVersionRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	orig := writeEnvelope(t, path, CurrentVersion+1, "boot-a", `{"claims":{},"somethingNew":[1,2]}`)
	s, _, err := Open(dir, WithBootID("boot-a"))
	var uv *UnsupportedVersionError
	if !errors.As(err, &uv) || uv.Version != CurrentVersion+1 || uv.Path != path {
		t.Fatalf("Open error = %v, want *UnsupportedVersionError for version %d", err, CurrentVersion+1)
	}
	if s != nil {
		t.Error("Open returned a store with the error")
	}
	if !strings.Contains(err.Error(), "schema version 3") || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the file and version", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(orig, after) {
		t.Error("newer checkpoint was modified")
	}
	entries := dataFiles(t, dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the untouched checkpoint", len(entries))
	}
}

func TestCorruptMovedAside(t *testing.T) {
	// A valid file to damage.
	src := t.TempDir()
	s, _ := open(t, src, WithClock(newClock().now))
	for _, c := range []ClaimState{claim("c1"), migClaim("c2")} {
		if err := s.Put(c, atomicfile.ProcessCrash); err != nil {
			t.Fatal(err)
		}
	}
	valid, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(valid)
	i := bytes.Index(flipped, []byte("claim-c1"))
	flipped[i] = 'K' // inside data, JSON still valid
	withChecksum := func(version, data string) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			sum, _ := checksum([]byte(data))
			raw := fmt.Sprintf(`{"version":%s,"checksum":%q,"data":%s}`, version, sum, data)
			if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw := func(b []byte) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}

	type tc struct {
		name   string
		make   func(*testing.T, string)
		reason string
	}
	cases := []tc{
		{"garbage", raw([]byte("\x00\x01garbage\xff")), "decode envelope"},
		{"empty file", raw(nil), "decode envelope"},
		{"checksum mismatch", raw(flipped), "checksum: file says"},
		{"checksum missing", raw(bytes.Replace(valid, []byte(`"checksum":"sha256:`), []byte(`"checksum":"md5:`), 1)), "checksum:"},
		{"version missing", withChecksum("0", `{"claims":{}}`), "version: 0"},
		{"version wrong type", raw([]byte(`{"version":"2","checksum":"sha256:00","data":{}}`)), "decode envelope"},
		{"data missing", raw([]byte(`{"version":2,"checksum":"sha256:00"}`)), "data: missing"},
		{"data is an array", withChecksum("2", `[1,2]`), "version 2 data"},
		{"claims is a string", withChecksum("2", `{"claims":"x"}`), "version 2 data"},
		{"phase is a number", withChecksum("2", `{"claims":{"u":{"uid":"u","phase":3}}}`), "version 2 data"},
		{"key differs from uid", withChecksum("2", `{"claims":{"u":{"uid":"v","phase":"PrepareStarted"}}}`), `data.claims["u"].uid`},
		{"unknown phase", withChecksum("2", `{"claims":{"u":{"uid":"u","phase":"Prepared"}}}`), `data.claims["u"].phase`},
		{"v1 wrong type", withChecksum("1", `{"preparedClaims":[]}`), "version 1 data"},
		// The version is outside the checksum: one damaged byte must not make the data read
		// as no claims, a trusted empty checkpoint.
		{"version 2 damaged to 1", raw(bytes.Replace(valid, []byte(`"version":2`), []byte(`"version":1`), 1)), "version 1 data"},
		{"version 1 damaged to 2", withChecksum("2", `{"preparedClaims":{}}`), `version 2 data: "claims" is missing`},
		{"v1 without its claims", withChecksum("1", `{}`), `version 1 data: "preparedClaims" is missing`},
		{"claims null", withChecksum("2", `{"claims":null}`), `"claims" is missing`},
	}
	for _, off := range []int{1, 10, len(valid) / 3, len(valid) / 2, len(valid) - 3, len(valid) - 2} {
		cases = append(cases, tc{fmt.Sprintf("truncated at %d of %d", off, len(valid)), raw(valid[:off]), "decode envelope"})
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			c.make(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, rep := open(t, dir, WithClock(newClock().now))
			if !rep.Corrupt || !errors.Is(rep.Reason, ErrCorrupt) {
				t.Fatalf("report = %+v, want Corrupt with a reason wrapping ErrCorrupt", rep)
			}
			if !strings.Contains(rep.Reason.Error(), c.reason) || !strings.Contains(rep.Reason.Error(), path) {
				t.Errorf("reason %q does not contain %q and the path", rep.Reason, c.reason)
			}
			wantMoved := path + ".corrupt-20260701T120001.000000000Z"
			if rep.MovedTo != wantMoved {
				t.Errorf("MovedTo = %q, want %q", rep.MovedTo, wantMoved)
			}
			moved, err := os.ReadFile(rep.MovedTo)
			if err != nil || !bytes.Equal(before, moved) {
				t.Errorf("corrupt copy is not byte-identical to the original (err %v)", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("corrupt checkpoint still in place: %v", err)
			}
			if got := s.List(); len(got) != 0 {
				t.Errorf("state after corrupt load has %d claims, want none", len(got))
			}
			// The store is usable and the next Open is clean.
			if err := s.Put(claim("new"), atomicfile.ProcessCrash); err != nil {
				t.Fatalf("Put after corrupt load: %v", err)
			}
			s2, rep2 := open(t, dir)
			if rep2.Corrupt {
				t.Errorf("Open after recovery still corrupt: %v", rep2.Reason)
			}
			if _, ok := s2.Get("new"); !ok {
				t.Error("claim written after recovery lost")
			}
		})
	}
	// The uncorrupted file really is valid, so the cases above fail for the reason they name.
	ok := t.TempDir()
	if err := os.WriteFile(filepath.Join(ok, FileName), valid, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, rep := open(t, ok); rep.Corrupt {
		t.Fatalf("undamaged file reported corrupt: %v", rep.Reason)
	}
	// Truncating only the final newline leaves a complete checkpoint, not a corrupt one.
	if err := os.WriteFile(filepath.Join(ok, FileName), valid[:len(valid)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, rep := open(t, ok); rep.Corrupt {
		t.Fatalf("file without trailing newline reported corrupt: %v", rep.Reason)
	}
}

func TestCorruptCopiesPruned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	clk := newClock()
	var moved []string
	for i := range 7 {
		if err := os.WriteFile(path, fmt.Appendf(nil, "garbage %d", i), 0o600); err != nil {
			t.Fatal(err)
		}
		_, rep := open(t, dir, WithClock(clk.now), WithMaxCorrupt(3))
		moved = append(moved, filepath.Base(rep.MovedTo))
	}
	entries := dataFiles(t, dir)
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff(moved[4:], got); diff != "" {
		t.Errorf("kept corrupt copies (-want newest 3 +got):\n%s", diff)
	}
	last, _ := os.ReadFile(filepath.Join(dir, moved[6]))
	if string(last) != "garbage 6" {
		t.Errorf("newest copy holds %q", last)
	}
}

func TestCorruptNameClash(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	fixed := func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	var moved []string
	for i := range 12 {
		if err := os.WriteFile(path, fmt.Appendf(nil, "garbage %d", i), 0o600); err != nil {
			t.Fatal(err)
		}
		_, rep := open(t, dir, WithClock(fixed), WithMaxCorrupt(2))
		moved = append(moved, rep.MovedTo)
	}
	for i, want := range []string{"garbage 10", "garbage 11"} {
		b, err := os.ReadFile(moved[10+i])
		if err != nil || string(b) != want {
			t.Errorf("copy %s = %q, %v; want %q", moved[10+i], b, err, want)
		}
	}
	if entries := dataFiles(t, dir); len(entries) != 2 {
		t.Errorf("%d copies kept, want 2", len(entries))
	}
}

func TestUnreadable(t *testing.T) {
	t.Run("directory in the way", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.MkdirAll(filepath.Join(path, "inner"), 0o700); err != nil {
			t.Fatal(err)
		}
		s, rep := open(t, dir, WithClock(newClock().now))
		if !rep.Corrupt || rep.Reason == nil || !strings.Contains(rep.Reason.Error(), "read checkpoint "+path) {
			t.Fatalf("report = %+v", rep)
		}
		if st, err := os.Stat(filepath.Join(rep.MovedTo, "inner")); err != nil || !st.IsDir() {
			t.Errorf("directory not moved aside intact: %v", err)
		}
		if err := s.Put(claim("c"), atomicfile.ProcessCrash); err != nil {
			t.Errorf("Put after moving the directory aside: %v", err)
		}
	})
	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads files of any mode")
		}
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, []byte("secret"), 0o000); err != nil {
			t.Fatal(err)
		}
		_, rep := open(t, dir)
		if !rep.Corrupt || !errors.Is(rep.Reason, fs.ErrPermission) {
			t.Fatalf("report = %+v, want corrupt with a permission error", rep)
		}
	})
	t.Run("state directory is a file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.WriteFile(dir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := Open(dir, WithBootID("b"))
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("Open on a file = %v, want an error naming it", err)
		}
	})
}

func TestModes(t *testing.T) {
	parent := t.TempDir()
	for _, tc := range []struct {
		name     string
		dirMode  fs.FileMode // 0: directory does not exist yet
		fileMode fs.FileMode // 0: no checkpoint yet
	}{
		{"new directory", 0, 0},
		{"loose directory", 0o755, 0},
		{"loose file", 0o777, 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(parent, strings.ReplaceAll(tc.name, " ", "-"), "state")
			if tc.dirMode != 0 {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.dirMode); err != nil {
					t.Fatal(err)
				}
			}
			if tc.fileMode != 0 {
				writeEnvelope(t, filepath.Join(dir, FileName), 2, "boot-a", `{"claims":{}}`)
				if err := os.Chmod(filepath.Join(dir, FileName), tc.fileMode); err != nil {
					t.Fatal(err)
				}
			}
			s, _ := open(t, dir)
			if tc.fileMode == 0 {
				if err := s.Put(claim("c"), atomicfile.ProcessCrash); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []struct {
				path string
				want fs.FileMode
			}{{dir, DirMode}, {s.Path(), FileMode}} {
				st, err := os.Stat(c.path)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != c.want {
					t.Errorf("%s mode = %v, want %v", c.path, st.Mode().Perm(), c.want)
				}
			}
		})
	}
}

func TestConcurrentUpdates(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, WithClock(newClock().now))
	const workers = 50
	shared := ClaimState{UID: "shared", Phase: PrepareStarted}
	if err := s.Put(shared, atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*workers)
	for i := range workers {
		wg.Go(func() {
			uid := fmt.Sprintf("c%02d", i)
			if err := s.Put(claim(uid), atomicfile.ProcessCrash); err != nil {
				errs <- err
			}
			// Read-modify-write of one claim by everybody: no append may be lost.
			if err := s.Update(atomicfile.ProcessCrash, func(st *State) error {
				c := st.Claims["shared"]
				c.Devices = append(c.Devices, PreparedDevice{Device: uid})
				st.Claims["shared"] = c
				return nil
			}); err != nil {
				errs <- err
			}
			if _, ok := s.Get(uid); !ok {
				errs <- fmt.Errorf("Get(%s) after Put: not found", uid)
			}
			_ = s.List()
			if i%2 == 0 {
				if err := s.Delete(uid, atomicfile.ProcessCrash); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := claims(s)
	if len(got) != 1+workers/2 {
		t.Errorf("%d claims, want %d", len(got), 1+workers/2)
	}
	for i := range workers {
		_, ok := got[fmt.Sprintf("c%02d", i)]
		if ok != (i%2 == 1) {
			t.Errorf("claim c%02d present = %v", i, ok)
		}
	}
	seen := map[string]bool{}
	for _, d := range got["shared"].Devices {
		seen[d.Device] = true
	}
	if len(seen) != workers || len(got["shared"].Devices) != workers {
		t.Errorf("shared claim has %d devices (%d distinct), want %d", len(got["shared"].Devices), len(seen), workers)
	}
	s2, _ := open(t, dir)
	if diff := cmp.Diff(got, claims(s2)); diff != "" {
		t.Errorf("disk differs from memory (-memory +disk):\n%s", diff)
	}
}

// TestGroupCommit queues updates behind a write in flight and checks that they are applied in
// one write, that a failing function or a panic affects only its caller, and that a failed batch
// write fails the whole batch and changes nothing.
func TestGroupCommit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failBatch bool
	}{{"batch written", false}, {"batch write fails", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var mu sync.Mutex
			writes, armed := 0, false // Open's own write of the fresh state is not counted
			entered, release := make(chan struct{}), make(chan struct{})
			write := func(path string, data []byte, perm fs.FileMode, d atomicfile.Durability) error {
				mu.Lock()
				if !armed {
					mu.Unlock()
					return atomicfile.New().Write(path, data, perm, d)
				}
				writes++
				n := writes
				mu.Unlock()
				if n == 1 {
					close(entered)
					<-release
				}
				if n == 2 && tc.failBatch {
					return errors.New("io error")
				}
				return atomicfile.New().Write(path, data, perm, d)
			}
			s, _ := open(t, dir, WithWriteFunc(write))
			mu.Lock()
			armed = true
			mu.Unlock()
			first := make(chan error, 1)
			go func() { first <- s.Put(claim("first"), atomicfile.ProcessCrash) }()
			<-entered

			const queued = 10
			results := make([]chan error, queued+2)
			for i := range queued {
				results[i] = make(chan error, 1)
				go func() { results[i] <- s.Put(claim(fmt.Sprintf("q%d", i)), atomicfile.ProcessCrash) }()
			}
			fnErr := errors.New("refused")
			results[queued] = make(chan error, 1)
			go func() {
				results[queued] <- s.Update(atomicfile.ProcessCrash, func(st *State) error { st.Claims["bad"] = claim("bad"); return fnErr })
			}()
			results[queued+1] = make(chan error, 1)
			go func() {
				results[queued+1] <- s.Update(atomicfile.ProcessCrash, func(st *State) error { st.Claims["x"] = claim("x"); panic("boom") })
			}()
			for { // wait until all are queued behind the write in flight
				s.qmu.Lock()
				n := len(s.queue)
				s.qmu.Unlock()
				if n == queued+2 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			close(release)
			if err := <-first; err != nil {
				t.Fatalf("first Put: %v", err)
			}
			for i := range queued {
				err := <-results[i]
				if tc.failBatch != (err != nil) {
					t.Errorf("queued Put %d: %v", i, err)
				}
			}
			if err := <-results[queued]; !errors.Is(err, fnErr) {
				t.Errorf("failing fn in a batch returned %v, want its own error", err)
			}
			if err := <-results[queued+1]; err == nil || !strings.Contains(err.Error(), "panicked: boom") {
				t.Errorf("panicking fn returned %v", err)
			}
			if writes != 2 {
				t.Errorf("%d writes, want 2 (one, then one for the whole batch)", writes)
			}
			want := map[string]bool{"first": true}
			if !tc.failBatch {
				for i := range queued {
					want[fmt.Sprintf("q%d", i)] = true
				}
			}
			got := map[string]bool{}
			for uid := range claims(s) {
				got[uid] = true
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("claims in memory (-want +got):\n%s", diff)
			}
			s2, _ := open(t, dir)
			if diff := cmp.Diff(claims(s), claims(s2)); diff != "" {
				t.Errorf("disk differs from memory (-memory +disk):\n%s", diff)
			}
			// The store still works after the batch.
			if err := s.Put(claim("after"), atomicfile.ProcessCrash); err != nil {
				t.Errorf("Put after the batch: %v", err)
			}
		})
	}
}

func TestCrashMidWrite(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	if err := s.Put(claim("kept"), atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	before := claims(s)
	// The process dies after writing part of the next checkpoint to its temporary file, before the
	// rename: simulate with a write function that leaves exactly that behind.
	crash := func(path string, data []byte, _ fs.FileMode, _ atomicfile.Durability) error {
		tmp := filepath.Join(filepath.Dir(path), atomicfile.TempPrefix+filepath.Base(path)+"-4242")
		if err := os.WriteFile(tmp, data[:len(data)/2], 0o600); err != nil {
			return err
		}
		return errors.New("killed")
	}
	s2, _ := open(t, dir, WithWriteFunc(crash))
	if err := s2.Put(claim("lost"), atomicfile.ProcessCrash); err == nil {
		t.Fatal("Put with a crashing writer succeeded")
	}
	s3, rep := open(t, dir)
	if diff := cmp.Diff([]string{atomicfile.TempPrefix + FileName + "-4242"}, rep.CleanedTemp); diff != "" {
		t.Errorf("CleanedTemp (-want +got):\n%s", diff)
	}
	if rep.Corrupt {
		t.Errorf("checkpoint corrupt after a crash mid-write: %v", rep.Reason)
	}
	if diff := cmp.Diff(before, claims(s3)); diff != "" {
		t.Errorf("state after crash (-before +after):\n%s", diff)
	}
	entries := dataFiles(t, dir)
	for _, e := range entries {
		if atomicfile.IsTemp(e.Name()) {
			t.Errorf("temporary file %s survived Open", e.Name())
		}
	}
}

func TestFailedUpdateLeavesState(t *testing.T) {
	dir := t.TempDir()
	injected := errors.New("disk full")
	var fail bool
	var writes int
	write := func(path string, data []byte, perm fs.FileMode, d atomicfile.Durability) error {
		writes++
		if fail {
			return injected
		}
		return atomicfile.New().Write(path, data, perm, d)
	}
	s, _ := open(t, dir, WithWriteFunc(write))
	if err := s.Put(migClaim("c1"), atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	before := claims(s)

	fnErr := errors.New("fn refused")
	for _, tc := range []struct {
		name    string
		fail    bool
		fn      func(*State) error
		wantErr string
		is      error
	}{
		{"write fails", true, func(st *State) error {
			c := st.Claims["c1"]
			c.Phase = UnprepareStarted
			c.Devices[0].CDIDeviceIDs[0] = "changed-in-place"
			c.Devices[1].MIG.GIID = 99
			st.Claims["c1"] = c
			st.Claims["c2"] = claim("c2")
			return nil
		}, "update checkpoint " + filepath.Join(dir, FileName) + ": disk full", injected},
		{"delete with write failing", true, func(st *State) error { delete(st.Claims, "c1"); return nil }, "disk full", injected},
		{"fn fails after mutating", false, func(st *State) error {
			st.Claims["c1"].Devices[0].CDIDeviceIDs[0] = "mutated"
			return fnErr
		}, "fn refused", fnErr},
		{"empty uid", false, func(st *State) error { st.Claims[""] = ClaimState{Phase: PrepareStarted}; return nil }, `claims[""]: empty claim UID`, nil},
		{"bad phase", false, func(st *State) error { st.Claims["x"] = ClaimState{UID: "x", Phase: "Done"}; return nil }, `claims["x"].phase: "Done"`, nil},
		{"bad sharing", false, func(st *State) error {
			st.Claims["c1"].Devices[1].Sharing = json.RawMessage("{oops")
			return nil
		}, `claims["c1"].devices[1].sharing: not valid JSON`, nil},
		{"mig without parent", false, func(st *State) error {
			st.Claims["c1"].Devices[1].MIG.ParentUUID = ""
			return nil
		}, `claims["c1"].devices[1].mig.parentUUID: empty`, nil},
		{"empty device name", false, func(st *State) error {
			st.Claims["c1"].Devices[0].Device = ""
			return nil
		}, `claims["c1"].devices[0].device: empty device name`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail = tc.fail
			defer func() { fail = false }()
			err := s.Update(atomicfile.ProcessCrash, tc.fn)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Update error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Update error %v does not wrap %v", err, tc.is)
			}
			if diff := cmp.Diff(before, claims(s)); diff != "" {
				t.Errorf("in-memory state changed by a failed Update (-before +after):\n%s", diff)
			}
			s2, _ := open(t, dir)
			if diff := cmp.Diff(before, claims(s2)); diff != "" {
				t.Errorf("disk changed by a failed Update (-before +after):\n%s", diff)
			}
		})
	}
	// The store keeps working after failures.
	if err := s.Put(claim("c2"), atomicfile.ProcessCrash); err != nil {
		t.Fatalf("Put after failures: %v", err)
	}
	if _, ok := s.Get("c2"); !ok {
		t.Error("c2 missing after successful Put")
	}

	// A change that changes nothing is not written.
	writes = 0
	c1, _ := s.Get("c1")
	for _, fn := range []func() error{
		func() error { return s.Put(c1, atomicfile.ProcessCrash) },
		func() error { return s.Delete("unknown", atomicfile.ProcessCrash) },
		func() error { return s.Update(atomicfile.ProcessCrash, func(*State) error { return nil }) },
	} {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	if writes != 0 {
		t.Errorf("no-op updates wrote %d times", writes)
	}
}

func TestCopiesAreIsolated(t *testing.T) {
	s, _ := open(t, t.TempDir())
	in := migClaim("c")
	if err := s.Put(in, atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	in.Devices[0].CDIDeviceIDs[0] = "caller changed its input"
	in.Devices[1].MIG.GIID = 1000
	in.Devices[1].Sharing[2] = 'X'
	got, _ := s.Get("c")
	got.Devices[0].Device = "caller changed a Get result"
	got.Devices[1].MIG.CIID = 1000
	list := s.List()
	list[0].Devices[1].CDIDeviceIDs[0] = "caller changed a List result"

	again, _ := s.Get("c")
	if diff := cmp.Diff(migClaim("c"), again, ignoreStamps); diff != "" {
		t.Errorf("store state changed through a shared reference (-want +got):\n%s", diff)
	}
}

func TestReboot(t *testing.T) {
	dir := t.TempDir()
	bootFile := filepath.Join(t.TempDir(), "boot_id")
	setBoot := func(id string) {
		if err := os.WriteFile(bootFile, []byte(id+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	openBoot := func() (*Store, LoadReport) {
		t.Helper()
		s, rep, err := Open(dir, WithBootIDPath(bootFile), WithLogger(ktesting.NewLogger(t, ktesting.NewConfig())))
		if err != nil {
			t.Fatal(err)
		}
		return s, rep
	}
	setBoot("11111111-aaaa")
	s, rep := openBoot()
	if rep.Rebooted || rep.BootID != "11111111-aaaa" || s.BootID() != "11111111-aaaa" {
		t.Errorf("first Open report = %+v", rep)
	}
	if err := s.Put(claim("before"), atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	_, rep = openBoot()
	if rep.Rebooted {
		t.Errorf("same boot reported as reboot: %+v", rep)
	}

	setBoot("22222222-bbbb")
	s, rep = openBoot()
	want := LoadReport{Path: s.Path(), Rebooted: true, PreviousBootID: "11111111-aaaa", BootID: "22222222-bbbb"}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report after reboot (-want +got):\n%s", diff)
	}
	c, ok := s.Get("before")
	if !ok || c.BootID != "11111111-aaaa" {
		t.Errorf("claim from the earlier boot: ok %v BootID %q, want it kept with the old boot ID", ok, c.BootID)
	}
	// Writing records the new boot; the old claim keeps its boot ID until it changes.
	if err := s.Put(claim("after"), atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	s, rep = openBoot()
	if rep.Rebooted {
		t.Errorf("reboot reported again after a write in the new boot")
	}
	if c, _ := s.Get("before"); c.BootID != "11111111-aaaa" {
		t.Errorf("unchanged claim re-stamped with boot %q", c.BootID)
	}
	if c, _ := s.Get("after"); c.BootID != "22222222-bbbb" {
		t.Errorf("new claim stamped with boot %q", c.BootID)
	}

	for name, content := range map[string]*string{"missing": nil, "empty": new("  \n")} {
		t.Run("boot ID "+name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "boot_id")
			if content != nil {
				if err := os.WriteFile(p, []byte(*content), 0o444); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Open(t.TempDir(), WithBootIDPath(p))
			if err == nil || !strings.Contains(err.Error(), "boot ID") || !strings.Contains(err.Error(), p) {
				t.Errorf("Open = %v, want an error naming the boot ID file", err)
			}
		})
	}
}

func TestCorruptIsLogged(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	_, rep, err := Open(dir, WithBootID("b"), WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	for _, want := range []string{"Checkpoint unusable", `movedTo="` + rep.MovedTo + `"`, "decode envelope"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log does not contain %q:\n%s", want, logs)
		}
	}
}

// BenchmarkUpdate measures one claim update through Put, as the plugin makes them (encode, temp
// file, rename), in a store holding 100 claims.
func BenchmarkUpdate(b *testing.B) { benchmarkUpdate(b, atomicfile.New().Write) }

// BenchmarkUpdateNoSync is BenchmarkUpdate without the file system: the CPU cost of an update.
func BenchmarkUpdateNoSync(b *testing.B) {
	benchmarkUpdate(b, func(string, []byte, fs.FileMode, atomicfile.Durability) error { return nil })
}

// BenchmarkUpdateParallel is BenchmarkUpdate from 16 goroutines at once, each changing its own
// claim, as concurrent prepares on different GPUs do; group commit shares the fsyncs.
func BenchmarkUpdateParallel(b *testing.B) {
	s, _ := open(b, b.TempDir(), WithLogger(klog.Logger{}))
	for i := range 100 {
		if err := s.Put(migClaim(fmt.Sprintf("claim-%03d", i)), atomicfile.ProcessCrash); err != nil {
			b.Fatal(err)
		}
	}
	var next sync.Mutex
	id := 0
	b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		uid := fmt.Sprintf("claim-%03d", id%100)
		id++
		next.Unlock()
		c, _ := s.Get(uid)
		n := 0
		for pb.Next() {
			n++
			c.Name = fmt.Sprintf("n%d", n)
			if err := s.Put(c, atomicfile.ProcessCrash); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchmarkUpdate(b *testing.B, write WriteFunc) {
	dir := b.TempDir()
	s, _ := open(b, dir, WithLogger(klog.Logger{}))
	for i := range 100 {
		if err := s.Put(migClaim(fmt.Sprintf("claim-%03d", i)), atomicfile.ProcessCrash); err != nil {
			b.Fatal(err)
		}
	}
	st, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}
	s.write = write
	c, _ := s.Get("claim-042")
	phases := []Phase{PrepareStarted, PrepareCompleted}
	n := 0
	for b.Loop() {
		n++
		c.Phase = phases[n%2]
		if err := s.Put(c, atomicfile.ProcessCrash); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.Size()), "file-bytes")
}

// dataFiles lists dir without the lock file, which every store keeps there.
func dataFiles(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == LockFileName })
}

// TestLoadedFileStaysOpen: a store tells another process's write by the file's identity, so it
// keeps the version it loaded or wrote open: a file system that hands a freed inode number to
// the next new file (ext4 does at once) could otherwise give the other process's next version
// the same inode, size and, on kernels that stamp at the clock tick, times, and the store would
// miss that write and overwrite it. The reuse cannot be forced here; what prevents it can be
// checked: after its own writes and after a reload, the store holds the checkpoint on disk open.
func TestLoadedFileStaysOpen(t *testing.T) {
	dir := t.TempDir()
	a, _ := open(t, dir)
	b, _ := open(t, dir)
	held := func(step string) {
		t.Helper()
		var want, got unix.Stat_t
		if err := unix.Stat(a.Path(), &want); err != nil {
			t.Fatal(err)
		}
		if a.pinned == nil {
			t.Fatalf("%s: the store holds no checkpoint file open", step)
		}
		if err := unix.Fstat(int(a.pinned.Fd()), &got); err != nil {
			t.Fatal(err)
		}
		if got.Ino != want.Ino || got.Dev != want.Dev {
			t.Errorf("%s: the store holds inode %d open, the checkpoint is inode %d", step, got.Ino, want.Ino)
		}
	}
	held("after Open")
	if err := a.Put(claim("c1"), atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	held("after its own write")
	for _, uid := range []string{"c2", "c3"} {
		if err := b.Put(claim(uid), atomicfile.ProcessCrash); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Refresh(); err != nil {
		t.Fatal(err)
	}
	held("after a reload")
	if got := claims(a); len(got) != 3 {
		t.Errorf("store sees %d claims after the other's writes, want 3", len(got))
	}
}

// TestTwoStoresOnOneDirectory is a rolling update: two plugin processes write the same
// checkpoint. Every update applies on top of what the other wrote (no lost update), and Refresh
// shows a store what the other wrote.
func TestTwoStoresOnOneDirectory(t *testing.T) {
	dir := t.TempDir()
	a, _ := open(t, dir)
	b, _ := open(t, dir)
	var wg sync.WaitGroup
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if err := s.Put(claim(fmt.Sprintf("c%02d", i)), atomicfile.ProcessCrash); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := b.Delete("c00", atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		got := claims(s)
		if len(got) != 39 {
			t.Errorf("store sees %d claims, want 39 (40 put by two stores, one deleted)", len(got))
		}
		if _, ok := got["c00"]; ok {
			t.Error("a claim deleted by the other store is still there")
		}
	}
	c, _ := open(t, dir)
	if got := claims(c); len(got) != 39 {
		t.Errorf("on disk: %d claims, want 39", len(got))
	}
}

// TestWriteNotDurableKeepsMemoryAndDiskEqual: when the checkpoint was replaced but its directory
// could not be synced, the update reports the error and the store holds what the file holds.
func TestWriteNotDurableKeepsMemoryAndDiskEqual(t *testing.T) {
	dir := t.TempDir()
	failSync := false
	write := func(path string, data []byte, perm fs.FileMode, d atomicfile.Durability) error {
		if err := atomicfile.New().Write(path, data, perm, d); err != nil || !failSync {
			return err
		}
		return &atomicfile.NotDurableError{Path: path, Err: errors.New("fsync: input/output error")}
	}
	s, _ := open(t, dir, WithWriteFunc(write))
	failSync = true
	var nd *atomicfile.NotDurableError
	if err := s.Put(claim("a"), atomicfile.ProcessCrash); !errors.As(err, &nd) {
		t.Fatalf("Put = %v, want the not-durable error", err)
	}
	s2, _ := open(t, dir)
	if diff := cmp.Diff(claims(s2), claims(s)); diff != "" {
		t.Errorf("memory differs from disk (-disk +memory):\n%s", diff)
	}
}

// TestDeviceEditsRoundTrip: the container edits a plugin of another device kind records are
// stored compacted, read back as stored, validated like Sharing and copied, never shared.
func TestDeviceEditsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	in := ClaimState{UID: "accel", Namespace: "ns", Name: "c", Phase: PrepareCompleted, Devices: []PreparedDevice{{
		Request: "acc", Pool: "node-a", Device: "accel-3",
		Edits: json.RawMessage("{ \"deviceNodes\": [ {\"path\": \"/dev/accel3\"} ] }"),
	}}}
	if err := s.Put(in, atomicfile.ProcessCrash); err != nil {
		t.Fatal(err)
	}
	in.Devices[0].Edits[2] = 'X'
	want := in.Clone()
	want.Devices[0].Edits = json.RawMessage(`{"deviceNodes":[{"path":"/dev/accel3"}]}`)
	got, _ := s.Get("accel")
	if diff := cmp.Diff(want, got, ignoreStamps); diff != "" {
		t.Errorf("in memory (-want +got):\n%s", diff)
	}
	got.Devices[0].Edits[0] = 'X'
	s2, _ := open(t, dir)
	again, _ := s2.Get("accel")
	if diff := cmp.Diff(want, again, ignoreStamps); diff != "" {
		t.Errorf("from disk (-want +got):\n%s", diff)
	}
	err := s2.Update(atomicfile.ProcessCrash, func(st *State) error {
		st.Claims["accel"].Devices[0].Edits = json.RawMessage("{oops")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `claims["accel"].devices[0].edits: not valid JSON`) {
		t.Fatalf("invalid edits: error %v", err)
	}
}

// TestListFunc: ListFunc returns copies of just the claims asked for, ordered by UID whatever
// the map's order; List returns all of them the same way.
func TestListFunc(t *testing.T) {
	s, _ := open(t, t.TempDir())
	for _, uid := range []string{"c3", "c1", "c4", "c2"} {
		c := claim(uid)
		if uid == "c3" || uid == "c1" {
			c.Phase = PrepareStarted
		}
		if err := s.Put(c, atomicfile.ProcessCrash); err != nil {
			t.Fatal(err)
		}
	}
	uids := func(cs []ClaimState) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.UID)
		}
		return out
	}
	started := s.ListFunc(func(c *ClaimState) bool { return c.Phase == PrepareStarted })
	if diff := cmp.Diff([]string{"c1", "c3"}, uids(started)); diff != "" {
		t.Errorf("ListFunc(PrepareStarted) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c1", "c2", "c3", "c4"}, uids(s.List())); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	started[0].Devices[0].Device = "changed"
	if c, _ := s.Get("c1"); c.Devices[0].Device == "changed" {
		t.Error("ListFunc returned the stored claim, not a copy")
	}
}

// TestSizeLimit: a checkpoint over the limit (a huge file, or a link to /dev/zero) is refused
// at Open without being read to its end or moved aside; an update that would write more than a
// restart reads back fails and leaves the store and the file as they were.
func TestSizeLimit(t *testing.T) {
	t.Run("oversized file refused, kept", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		orig := writeEnvelope(t, path, CurrentVersion, "boot-a", `{"claims":{}}`)
		s, _, err := Open(dir, WithBootID("boot-a"), WithMaxSize(int64(len(orig)-1)))
		if err == nil || s != nil {
			t.Fatalf("Open = %v, %v; want an error for a checkpoint over the limit", s, err)
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "limit") {
			t.Errorf("error %q does not name the file and the limit", err)
		}
		after, _ := os.ReadFile(path)
		if !bytes.Equal(orig, after) || len(dataFiles(t, dir)) != 1 {
			t.Error("the oversized checkpoint was changed or moved aside")
		}
	})
	t.Run("link to /dev/zero", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink("/dev/zero", filepath.Join(dir, FileName)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := Open(dir, WithBootID("boot-a")); err == nil || !strings.Contains(err.Error(), "64 MiB") {
			t.Fatalf("Open = %v, want the 64 MiB limit", err)
		}
	})
	t.Run("update over the limit fails, nothing changes", func(t *testing.T) {
		dir := t.TempDir()
		s, _ := open(t, dir, WithMaxSize(2048))
		defer func() { _ = s.Close() }()
		var put []string
		var err error
		for i := 0; err == nil && i < 100; i++ {
			uid := fmt.Sprintf("uid-%d", i)
			if err = s.Put(claim(uid), atomicfile.ProcessCrash); err == nil {
				put = append(put, uid)
			}
		}
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("Put = %v after %d claims, want the size limit", err, len(put))
		}
		before, _ := os.ReadFile(filepath.Join(dir, FileName))
		if err := s.Put(claim("uid-x"), atomicfile.ProcessCrash); err == nil {
			t.Fatal("a second Put over the limit succeeded")
		}
		if after, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Equal(before, after) {
			t.Error("a failed update changed the file")
		}
		if got := len(claims(s)); got != len(put) {
			t.Errorf("store holds %d claims, want the %d that fitted", got, len(put))
		}
		_ = s.Close()
		s2, _ := open(t, dir, WithMaxSize(2048))
		defer func() { _ = s2.Close() }()
		if got := len(claims(s2)); got != len(put) {
			t.Errorf("reopened store holds %d claims, want %d", got, len(put))
		}
	})
}
