package nodeplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/cdi"
	"github.com/gpudra/gpudra/internal/atomicfile"
	"github.com/gpudra/gpudra/internal/durability"
)

// recordsDir is the directory under the state directory that holds the records.
const recordsDir = "computedomain-claims"

// record is what Unprepare must know of a prepared daemon device that Driver.Unprepare is not
// told: the domain the claim's config named. Prepare writes it before it creates the daemon's
// directory, so that Unprepare, which the plugin calls after a failed or interrupted prepare
// too, can remove it.
type record struct {
	// DomainID is the domain's UID.
	DomainID types.UID `json:"domainID"`
}

// records are the records of one state directory, one file per claim and device:
// <state dir>/computedomain-claims/<claim UID>.<device>.json.
//
// A record must survive what the changes it describes survive, up to what the plugin's own
// checkpoint survives: a crash of the process, which the atomic rename gives without an fsync
// (durability.StepDurability). After a power loss the plugin's reconciliation unprepares the
// claims of the earlier boot that its checkpoint still holds, and a record lost with them would
// leave at most an empty daemon directory of the domain.
type records struct {
	dir   string
	files *atomicfile.Files
}

func newRecords(stateDir string) *records {
	return &records{dir: filepath.Join(stateDir, recordsDir), files: atomicfile.New()}
}

// path is the record file of a claim's device, checking the claim UID and device name that
// make up its name.
func (r *records) path(claim types.UID, device string) (string, error) {
	if err := cdi.ValidateClaimUID(string(claim)); err != nil {
		return "", err
	}
	if device != ChannelDevice && device != DaemonDevice {
		return "", fmt.Errorf("device %q is not %s or %s", device, ChannelDevice, DaemonDevice)
	}
	return filepath.Join(r.dir, string(claim)+"."+device+".json"), nil
}

// put records rec for the claim's device.
func (r *records) put(claim types.UID, device string, rec record) error {
	p, err := r.path(claim, device)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return fmt.Errorf("create the record directory: %w", err)
	}
	if err := r.files.Write(p, data, 0o600, durability.StepDurability); err != nil {
		return fmt.Errorf("record claim %s device %s: %w", claim, device, err)
	}
	return nil
}

// get returns the record of the claim's device; ok is false when there is none.
func (r *records) get(claim types.UID, device string) (rec record, ok bool, err error) {
	p, err := r.path(claim, device)
	if err != nil {
		return rec, false, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("read the record of claim %s device %s: %w", claim, device, err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, false, fmt.Errorf("record %s: %w", p, err)
	}
	if err := validateDomainID(string(rec.DomainID)); err != nil {
		return rec, false, fmt.Errorf("record %s: %w", p, err)
	}
	return rec, true, nil
}

// remove forgets the record of the claim's device.
func (r *records) remove(claim types.UID, device string) error {
	p, err := r.path(claim, device)
	if err != nil {
		return err
	}
	return r.files.Remove(p, durability.StepDurability)
}

// othersHold says whether a claim other than claim has a record of device for domain: what
// Prepare did for the domain on the node is still needed then.
func (r *records) othersHold(claim types.UID, device string, domain types.UID) (bool, error) {
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("list the records: %w", err)
	}
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), "."+device+".json")
		if !ok || uid == string(claim) || atomicfile.IsTemp(e.Name()) {
			continue
		}
		rec, found, err := r.get(types.UID(uid), device)
		if err != nil {
			return false, err
		}
		if found && rec.DomainID == domain {
			return true, nil
		}
	}
	return false, nil
}
