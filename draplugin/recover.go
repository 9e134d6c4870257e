package draplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/internal/checkpoint"
	"github.com/gpudra/gpudra/internal/reconcile"
	"github.com/gpudra/gpudra/sharing"
)

// trusted says whether the checkpoint can be believed about what is NOT prepared: a corrupt
// checkpoint was moved aside and a missing one may have been wiped while claims were prepared.
// Without it, what is on the node is the evidence, and nothing is destroyed for lack of a record.
func (p *Plugin) trusted() bool { return !p.checkpoint.Corrupt && !p.checkpoint.Fresh }

// adoptOrphans rebuilds, when the checkpoint cannot be trusted, the entries of claims whose CDI
// spec exists without one: each becomes a prepared, recovered claim with the devices its spec
// names, the MIG instances at their placements and the MPS daemon its spec mounts, so that
// kubelet's unprepare later releases exactly those.
func (p *Plugin) adoptOrphans(ctx context.Context, rep *ReconcileReport) error {
	if p.trusted() {
		return nil
	}
	done, err := reconcile.AdoptOrphans(ctx, p.store, p.writer, func(uid string) (checkpoint.ClaimState, error) { return p.adopt(ctx, uid) })
	rep.Adopted, rep.NotAdopted = done.Adopted, done.NotAdopted
	return err
}

// adopt builds the recovered entry of the claim of one CDI spec.
func (p *Plugin) adopt(ctx context.Context, uid string) (checkpoint.ClaimState, error) {
	spec, err := p.writer.Read(uid)
	if err != nil {
		return checkpoint.ClaimState{}, err
	}
	st := checkpoint.ClaimState{UID: uid, Phase: checkpoint.PrepareCompleted, Recovered: true}
	var sdevs []sharing.PreparedDevice
	for _, sd := range spec.Devices {
		name, ok := strings.CutPrefix(sd.Name, uid+"-")
		if !ok {
			return st, fmt.Errorf("spec device %q is not named <claim UID>-<device>", sd.Name)
		}
		pd, uuid, err := p.adoptDevice(ctx, name)
		if err != nil {
			return st, err
		}
		pd.CDIDeviceIDs = []string{p.gen.Kind() + "=" + sd.Name}
		st.Devices = append(st.Devices, pd)
		sdevs = append(sdevs, sharing.PreparedDevice{Pool: pd.Pool, Device: name, UUID: uuid, ParentUUID: pd.GPUUUID, Edits: sd.ContainerEdits})
	}
	rec := p.sharing.RecoverRecord(types.UID(uid), sdevs)
	if err := setSharing(&st, rec, true); err != nil {
		return st, err
	}
	return st, nil
}

// adoptDevice is the entry of one device named in a spec, and the UUID of the device (MIG
// device UUID for MIG).
func (p *Plugin) adoptDevice(ctx context.Context, name string) (checkpoint.PreparedDevice, string, error) {
	pub, ok := p.devices.lookup(name)
	if !ok {
		return checkpoint.PreparedDevice{}, "", fmt.Errorf("device %q is not published on this node", name)
	}
	pd := checkpoint.PreparedDevice{Pool: p.nodeName, Device: name, GPUUUID: pub.GPU.UUID}
	switch {
	case pub.MIG != nil:
		m := pub.MIG
		pd.MIG = &checkpoint.MIGInstance{ParentUUID: pub.GPU.UUID, Profile: m.Profile, GIProfileID: m.GIProfileID, CIProfileID: m.CIProfileID,
			Placement: checkpoint.Placement{Start: m.Placement.Start, Size: m.Placement.Size}, GIID: m.GIID, CIID: m.CIID, UUID: m.UUID}
		return pd, m.UUID, nil
	case pub.Partition != nil:
		pt := pub.Partition
		insts, err := p.mig.Instances(ctx, pub.GPU.UUID)
		if err != nil {
			return pd, "", err
		}
		i := slices.IndexFunc(insts, func(in MIGInstance) bool {
			return in.Placement == pt.Placement && in.GIProfileID == pt.Profile.ID && in.UUID != ""
		})
		if i < 0 {
			return pd, "", fmt.Errorf("device %q: no MIG instance at its placement", name)
		}
		in := insts[i]
		// Only the plugin creates instances on a GPU published as partitions: unprepare destroys it.
		pd.MIG = &checkpoint.MIGInstance{ParentUUID: pub.GPU.UUID, Profile: pt.Profile.Name, GIProfileID: pt.Profile.ID,
			Placement: checkpoint.Placement{Start: pt.Placement.Start, Size: pt.Placement.Size}, GIID: in.GIID, CIID: in.CIID, UUID: in.UUID, Created: true}
		return pd, in.UUID, nil
	}
	return pd, pub.GPU.UUID, nil
}
