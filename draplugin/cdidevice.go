package draplugin

import (
	"github.com/gpudra/gpudra"
	"github.com/gpudra/gpudra/cdi"
)

// cdiDevice is a published device's entry in a claim's CDI spec (cdi.ClaimDevices): the device
// name as published, the minor of the GPU's /dev/nvidia<N> node, and for an existing MIG device
// its UUID and GPU/compute instance IDs, whose capability nodes the spec also grants.
//
// A dynamic MIG partition has no instance until a claim that got it is prepared: its entry
// names the parent GPU, and the caller sets MIG and UUID from the instance it created.
func cdiDevice(d gpudra.PublishedDevice) cdi.Device {
	cd := cdi.Device{Name: d.Name}
	if d.GPU != nil {
		cd.GPUMinor, cd.UUID = d.GPU.Minor, d.GPU.UUID
	}
	if d.MIG != nil {
		cd.UUID = d.MIG.UUID
		cd.MIG = &cdi.MIGInstanceIDs{GI: d.MIG.GIID, CI: d.MIG.CIID}
	}
	return cd
}
