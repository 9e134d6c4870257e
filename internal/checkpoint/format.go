package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// CurrentVersion is the schema version Store writes.
//
// Version history:
//
//   - 1: data is {"preparedClaims": {UID: {"namespace", "name", "devices": [DRA device name...],
//     "cdiDeviceIDs": [ID...]}}}. A claim was recorded only after its prepare completed, so there
//     are no phases; cdiDeviceIDs[i] is the CDI device ID of devices[i]; no pool, request,
//     hardware identity or boot ID was kept. It migrates to version 2 as PrepareCompleted claims
//     whose devices carry only Device and CDIDeviceIDs, with empty BootID and zero UpdatedAt, so
//     reconciliation treats them as unverified.
//   - 2: data is State; the envelope also carries the boot ID of the writer.
//
// A change that an older reader would misread (a renamed field, a new Phase, a changed meaning)
// needs a new version and a migration; an added optional field does not, because readers ignore
// unknown fields and the checksum covers the stored bytes, not a re-encoding of them.
const CurrentVersion = 2

// ErrCorrupt is wrapped by LoadReport.Reason when the checkpoint could not be used.
var ErrCorrupt = errors.New("checkpoint corrupt")

// UnsupportedVersionError is returned by Open when the checkpoint was written by a newer schema
// than this binary understands. The file is left untouched: dropping it would forget prepared
// claims and leak their devices. Upgrade the driver again, or remove the file by hand after
// unpreparing every claim on the node.
type UnsupportedVersionError struct {
	// Path is the checkpoint file.
	Path string
	// Version is the version found in the file.
	Version int
}

// Error implements error.
func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("checkpoint %s has schema version %d; this binary reads versions 1 to %d",
		e.Path, e.Version, CurrentVersion)
}

const checksumPrefix = "sha256:"

// envelope is the on-disk form of every version.
type envelope struct {
	// Version is the schema version of Data.
	Version int `json:"version"`
	// BootID is the kernel boot ID of the writer (version 2 on). It is outside the checksum: a
	// damaged value can only make the reader report a reboot, which makes the caller re-verify
	// every claim, the safe direction.
	BootID string `json:"bootID,omitempty"`
	// Checksum is "sha256:" and the hex SHA-256 of the compact JSON encoding of Data.
	Checksum string `json:"checksum"`
	// Data is the versioned payload.
	Data json.RawMessage `json:"data"`
}

// stateV1 is the version 1 payload.
type stateV1 struct {
	PreparedClaims map[string]claimV1 `json:"preparedClaims"`
}

type claimV1 struct {
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	Devices      []string `json:"devices"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// checksum returns the envelope checksum of a JSON value: the SHA-256 of its compact encoding.
// Hashing the stored bytes rather than a re-encoding of the decoded structs keeps the checksum
// stable when fields are added.
func checksum(data []byte) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return checksumPrefix + hex.EncodeToString(sum[:]), nil
}

// encode returns the file content for state, written by a process running in bootID.
func encode(state State, bootID string) ([]byte, error) {
	return encodeCached(state, map[string][]byte{}, bootID)
}

// encodeCached is encode with enc holding the JSON encoding of some claims by UID; it adds the
// missing ones. The data it produces is byte for byte what json.Marshal(state) produces (keys
// escaped and sorted the same way), built from the cached parts. It is already compact, so it is
// hashed and embedded as is.
func encodeCached(state State, enc map[string][]byte, bootID string) ([]byte, error) {
	uids := slices.Sorted(maps.Keys(state.Claims))
	size := 0
	for _, uid := range uids {
		b, ok := enc[uid]
		if !ok {
			var err error
			if b, err = json.Marshal(state.Claims[uid]); err != nil {
				return nil, fmt.Errorf("encode checkpoint data: claims[%q]: %w", uid, err)
			}
			enc[uid] = b
		}
		size += len(uid) + len(b) + 8
	}
	data := make([]byte, 0, size+16)
	data = append(data, `{"claims":{`...)
	for i, uid := range uids {
		if i > 0 {
			data = append(data, ',')
		}
		key, err := json.Marshal(uid)
		if err != nil {
			return nil, fmt.Errorf("encode checkpoint data: claim key %q: %w", uid, err)
		}
		data = append(append(append(data, key...), ':'), enc[uid]...)
	}
	data = append(data, "}}"...)

	boot, err := json.Marshal(bootID)
	if err != nil {
		return nil, fmt.Errorf("encode checkpoint boot ID: %w", err)
	}
	sum := sha256.Sum256(data)
	b := make([]byte, 0, len(data)+len(boot)+128)
	b = fmt.Appendf(b, `{"version":%d,"bootID":%s,"checksum":"%s%x","data":`, CurrentVersion, boot, checksumPrefix, sum)
	b = append(b, data...)
	return append(b, "}\n"...), nil
}

// decoded is the result of reading a checkpoint file.
type decoded struct {
	state   State
	version int
	bootID  string
}

// decode parses file content. It returns *UnsupportedVersionError for a newer schema and an error
// wrapping ErrCorrupt, naming the field, for anything else that is wrong.
func decode(path string, b []byte) (decoded, error) {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return decoded{}, fmt.Errorf("%w: %s: decode envelope: %w", ErrCorrupt, path, err)
	}
	switch {
	case env.Version > CurrentVersion:
		return decoded{}, &UnsupportedVersionError{Path: path, Version: env.Version}
	case env.Version < 1:
		return decoded{}, fmt.Errorf("%w: %s: version: %d is missing or invalid", ErrCorrupt, path, env.Version)
	case len(env.Data) == 0 || string(env.Data) == "null":
		return decoded{}, fmt.Errorf("%w: %s: data: missing", ErrCorrupt, path)
	case !strings.HasPrefix(env.Checksum, checksumPrefix):
		return decoded{}, fmt.Errorf("%w: %s: checksum: %q is not of the form %s<hex>", ErrCorrupt, path, env.Checksum, checksumPrefix)
	}
	sum, err := checksum(env.Data)
	if err != nil {
		return decoded{}, fmt.Errorf("%w: %s: data: %w", ErrCorrupt, path, err)
	}
	if sum != env.Checksum {
		return decoded{}, fmt.Errorf("%w: %s: checksum: file says %s, data hashes to %s", ErrCorrupt, path, env.Checksum, sum)
	}
	var st State
	switch env.Version {
	case 1:
		st, err = migrateV1(env.Data)
	case 2:
		err = json.Unmarshal(env.Data, &st)
		if err == nil && st.Claims == nil {
			// Every version 2 writer writes the key, also for no claims. The version is outside
			// the checksum: a damaged one must not make the data read as no claims.
			err = errors.New(`"claims" is missing`)
		}
	}
	if err != nil {
		return decoded{}, fmt.Errorf("%w: %s: version %d data: %w", ErrCorrupt, path, env.Version, err)
	}
	if err := st.Validate(); err != nil {
		return decoded{}, fmt.Errorf("%w: %s: data.%w", ErrCorrupt, path, err)
	}
	st.normalize()
	return decoded{state: st, version: env.Version, bootID: env.BootID}, nil
}

// migrateV1 decodes a version 1 payload into the current State.
func migrateV1(data []byte) (State, error) {
	var v1 stateV1
	if err := json.Unmarshal(data, &v1); err != nil {
		return State{}, err
	}
	if v1.PreparedClaims == nil {
		// Every version 1 writer wrote the key. Without it the data is of another version and
		// the version (outside the checksum) is damaged: read as version 1 it would be no claims.
		return State{}, errors.New(`"preparedClaims" is missing`)
	}
	st := State{Claims: make(map[string]ClaimState, len(v1.PreparedClaims))}
	for uid, c := range v1.PreparedClaims {
		if len(c.CDIDeviceIDs) != len(c.Devices) {
			return State{}, fmt.Errorf("preparedClaims[%q]: %d devices but %d cdiDeviceIDs; version 1 keeps one ID per device",
				uid, len(c.Devices), len(c.CDIDeviceIDs))
		}
		cs := ClaimState{UID: uid, Namespace: c.Namespace, Name: c.Name, Phase: PrepareCompleted, UpdatedAt: time.Time{}}
		for i, name := range c.Devices {
			cs.Devices = append(cs.Devices, PreparedDevice{Device: name, CDIDeviceIDs: []string{c.CDIDeviceIDs[i]}})
		}
		st.Claims[uid] = cs
	}
	return st, nil
}
