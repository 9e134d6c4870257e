package nvmlmig_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpudra/gpudra/gpu/gputest"
	"github.com/gpudra/gpudra/mig"
	"github.com/gpudra/gpudra/mig/nvmlmig"
)

func recordings(t *testing.T) []gputest.Recording {
	t.Helper()
	recs, err := gputest.Recordings()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// recordedLayoutMachines maps models with recorded -lgi output to a fake machine of that model.
// GPU instance Ids are compared on machines whose fake numbers them as the recordings show
// (the RTX PRO 6000's); on the others the numbering is the fake's inference and only profiles,
// profile Ids and placements are compared.
var recordedLayoutMachines = map[string]struct {
	machine string
	ids     bool
}{
	"RTX PRO 6000 Blackwell": {"rtx-pro-6000x4", true},
	"A100-SXM4-40GB":         {"dgx-a100-40gb", false},
	"H100 80GB HBM3":         {"dgx-h100", false},
	"A30":                    {"a30x4", false},
}

// TestManagerCreatesRecordedLayouts applies every recorded -lgi layout through the InstanceManager on
// a fake machine of the model and reads back, through the fake, exactly what nvidia-smi listed.
func TestManagerCreatesRecordedLayouts(t *testing.T) {
	applied := map[string]int{}
	for _, r := range recordings(t) {
		target, ok := recordedLayoutMachines[r.Model]
		if !ok {
			continue
		}
		for i, text := range r.Instances {
			insts, err := mig.ParseSMIInstances(text)
			if err != nil {
				t.Fatal(err)
			}
			machine, err := gputest.New(target.machine)
			if err != nil {
				t.Fatal(err)
			}
			mg, err := nvmlmig.NewInstanceManager(machine.Device(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			var layout []mig.Instance
			var want []string
			for _, in := range insts {
				layout = append(layout, mig.At(in.Name, in.Placement.Start))
				want = append(want, lgiRow(in.Name, in.ProfileID, in.InstanceID, in.Placement, target.ids))
			}
			if _, err := mg.Apply(layout); err != nil {
				t.Fatalf("%s -lgi #%d: Apply(%s): %v", r.File, i, mig.FormatLayout(layout), err)
			}
			var got []string
			for _, gi := range machine.GPUInstances(0) {
				got = append(got, lgiRow(gi.Profile, gi.ProfileID, gi.ID, gi.Placement, target.ids))
			}
			slices.Sort(want)
			slices.Sort(got)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s -lgi #%d on %s (-recorded +created):\n%s", r.File, i, target.machine, diff)
			}
			applied[r.Model]++
		}
	}
	if applied["RTX PRO 6000 Blackwell"] != 2 {
		t.Errorf("applied %d RTX PRO 6000 layouts, want the 2 recorded", applied["RTX PRO 6000 Blackwell"])
	}
}

func lgiRow(profile string, profileID, instanceID int, pl mig.Placement, withID bool) string {
	if !withID {
		instanceID = -1
	}
	return fmt.Sprintf("%s profile=%d instance=%d at %d:%d", profile, profileID, instanceID, pl.Start, pl.Size)
}
