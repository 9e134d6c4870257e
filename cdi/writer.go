package cdi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpudra/gpudra/internal/atomicfile"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/specs-go"
)

// SpecFileMode is the mode of written spec files: container runtimes, which may run as other
// users, must be able to read them.
const SpecFileMode os.FileMode = 0o644

// Writer stores claim specs as files in a CDI spec directory, one file per claim named
// "<vendor>-<class>_<claimUID>.json". Every write is atomic (a temporary file renamed over the
// spec), so a container runtime scanning the directory sees a spec either complete or not at
// all, even if the process crashes. Temporary files never end in ".json", so the CDI library and
// List both ignore them.
//
// Writes and removals are not fsynced: the spec directory is normally a tmpfs (/var/run/cdi)
// that a power loss empties anyway, and the kubelet plugin's reconciliation writes the specs of
// prepared claims again after a reboot. On a disk directory a power loss may bring back a
// removed spec, lose a written one or tear it; reconciliation removes, rewrites or replaces them
// (package draplugin).
//
// A Writer has no mutable state and is safe for concurrent use; concurrent writes of the same
// claim leave one of the complete specs.
type Writer struct {
	dir, vendor, class string
	files              *atomicfile.Files
	// write replaces files.Write in tests that simulate a crash in the middle of a write.
	write func(path string, data []byte, perm os.FileMode) error
}

// specDurability is what a spec write or removal must survive: a crash of the writing process
// (a runtime must never read a partial spec), not a power loss (see Writer).
const specDurability = atomicfile.ProcessCrash

// WriterOption configures NewWriter.
type WriterOption func(*Writer)

// WithSpecDir sets the CDI spec directory (default DefaultSpecDir). The container runtime must
// scan it; use the highest-priority dynamic directory ("/var/run/cdi").
func WithSpecDir(dir string) WriterOption { return func(w *Writer) { w.dir = dir } }

// WithWriterKind sets the CDI vendor and class of the specs the Writer stores and finds (defaults
// DefaultVendor and DefaultClass); it must match the Generator's (WithKind).
func WithWriterKind(vendor, class string) WriterOption {
	return func(w *Writer) { w.vendor, w.class = vendor, class }
}

// NewWriter returns a Writer. The directory is created on the first Write when missing.
func NewWriter(opts ...WriterOption) (*Writer, error) {
	w := &Writer{dir: DefaultSpecDir, vendor: DefaultVendor, class: DefaultClass, files: atomicfile.New()}
	for _, o := range opts {
		o(w)
	}
	if w.dir == "" {
		return nil, errors.New("cdi writer: empty spec directory")
	}
	w.dir = filepath.Clean(w.dir)
	if err := validateKind(w.vendor, w.class); err != nil {
		return nil, fmt.Errorf("cdi writer: %w", err)
	}
	return w, nil
}

// Dir returns the spec directory.
func (w *Writer) Dir() string { return w.dir }

// Kind returns the CDI kind ("vendor/class") of the specs the Writer stores.
func (w *Writer) Kind() string { return w.vendor + "/" + w.class }

// prefix starts the file name of every spec this writer owns.
func (w *Writer) prefix() string { return cdiapi.GenerateTransientSpecName(w.vendor, w.class, "") }

// SpecPath returns the file a claim's spec is written to. The UID is validated first.
func (w *Writer) SpecPath(claimUID string) (string, error) {
	if err := ValidateClaimUID(claimUID); err != nil {
		return "", err
	}
	return filepath.Join(w.dir, cdiapi.GenerateTransientSpecName(w.vendor, w.class, claimUID)+".json"), nil
}

// Write validates cs and atomically writes it, with mode SpecFileMode, replacing an earlier spec
// of the same claim. It returns the file's path. The spec's kind must be this writer's, and its
// device names must all belong to the claim ("<claimUID>-...").
func (w *Writer) Write(cs *ClaimSpec) (string, error) {
	if cs == nil || cs.Spec == nil {
		return "", errors.New("cdi writer: nil claim spec")
	}
	p, err := w.SpecPath(cs.ClaimUID)
	if err != nil {
		return "", err
	}
	if want := w.vendor + "/" + w.class; cs.Spec.Kind != want {
		return "", fmt.Errorf("claim %s: spec kind %q: this writer only writes %q", cs.ClaimUID, cs.Spec.Kind, want)
	}
	for _, d := range cs.Spec.Devices {
		if !strings.HasPrefix(d.Name, cs.ClaimUID+"-") {
			return "", fmt.Errorf("claim %s: device %q: name must start with %q", cs.ClaimUID, d.Name, cs.ClaimUID+"-")
		}
	}
	if err := Validate(cs.Spec); err != nil {
		return "", fmt.Errorf("claim %s: invalid spec, not written: %w", cs.ClaimUID, err)
	}
	data, err := json.MarshalIndent(cs.Spec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("claim %s: encode spec: %w", cs.ClaimUID, err)
	}
	data = append(data, '\n')
	if err := os.MkdirAll(w.dir, 0o755); err != nil {
		return "", fmt.Errorf("claim %s: create spec directory: %w", cs.ClaimUID, err)
	}
	if err := w.writeFile(p, data); err != nil {
		return "", fmt.Errorf("claim %s: write spec: %w", cs.ClaimUID, err)
	}
	return p, nil
}

func (w *Writer) writeFile(path string, data []byte) error {
	if w.write != nil {
		return w.write(path, data, SpecFileMode)
	}
	return w.files.Write(path, data, SpecFileMode, specDurability)
}

// Remove deletes a claim's spec. A spec that does not exist is not an error, so Remove can be
// repeated after a crash.
func (w *Writer) Remove(claimUID string) error {
	p, err := w.SpecPath(claimUID)
	if err != nil {
		return err
	}
	if err := w.files.Remove(p, specDurability); err != nil {
		return fmt.Errorf("claim %s: remove spec: %w", claimUID, err)
	}
	return nil
}

// Read parses and validates a claim's spec file with the CDI library, as a runtime would. A
// missing spec gives an error wrapping fs.ErrNotExist.
func (w *Writer) Read(claimUID string) (*specs.Spec, error) {
	p, err := w.SpecPath(claimUID)
	if err != nil {
		return nil, err
	}
	s, err := cdiapi.ReadSpec(p, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("claim %s: spec %s: %w", claimUID, p, err)
		}
		return nil, fmt.Errorf("claim %s: %w", claimUID, err)
	}
	return s.Spec, nil
}

// List returns the UIDs of the claims that have a spec in the directory, sorted: the specs this
// writer's vendor and class own, for reconciliation after a restart. Temporary files of an
// interrupted write, and files whose name does not carry a canonical UUID, are not listed. A
// missing directory lists nothing.
//
// Other drivers write their specs to the same directory. Their file names differ from this
// writer's by the vendor and class they start with; but "<vendor>-<class>_" is ambiguous (vendor
// "example.com-accel" with class "claim", vendor "example.com" with class "accel-claim"), so a
// spec whose file says it is of another kind is not listed either, and neither Prune nor a
// plugin's adoption of orphan specs touches it. A file that cannot be decoded (a torn write on a
// disk directory) is listed, as its name says it is this writer's.
func (w *Writer) List() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list specs in %s: %w", w.dir, err)
	}
	var uids []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || atomicfile.IsTemp(name) {
			continue
		}
		uid, ok := strings.CutPrefix(name, w.prefix())
		if !ok {
			continue
		}
		if uid, ok = strings.CutSuffix(uid, ".json"); ok && ValidateClaimUID(uid) == nil && w.owns(uid) {
			uids = append(uids, uid)
		}
	}
	return uids, nil
}

// Prune removes the specs of every claim that List returns and keep does not contain, and returns
// their UIDs: after a restart, keep is the set of claims the plugin's checkpoint still holds as
// prepared. It stops at the first failed removal. Specs of other drivers are never removed: List
// does not return them.
func (w *Writer) Prune(keep []string) ([]string, error) {
	uids, err := w.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, uid := range uids {
		if slices.Contains(keep, uid) {
			continue
		}
		if err := w.Remove(uid); err != nil {
			return removed, err
		}
		removed = append(removed, uid)
	}
	return removed, nil
}

// owns says whether the claim's spec file is of this writer's kind, or cannot be decoded to say.
func (w *Writer) owns(claimUID string) bool {
	p, err := w.SpecPath(claimUID)
	if err != nil {
		return false
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return true // gone already, or unreadable: Remove says which
	}
	var head struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(data, &head) != nil || head.Kind == "" {
		return true
	}
	return head.Kind == w.Kind()
}

// CleanTemp removes temporary files that an interrupted Write of this writer's specs left in the
// directory and returns their names. Call it at start-up, before writes begin: it would also
// remove the temporary file of a write in progress.
func (w *Writer) CleanTemp() ([]string, error) {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("clean specs in %s: %w", w.dir, err)
	}
	var removed []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), atomicfile.TempPrefix+w.prefix()) {
			continue
		}
		p := filepath.Join(w.dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("remove leftover %s: %w", p, err)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
