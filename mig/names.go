package mig

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// IDAttribute is the profile-name attribute that tells apart GPU-instance profiles that
// ProfileName would name alike: "id<NVML profile Id>", as in "1g.12gb+id3".
const IDAttribute = "id"

// WithIDAttribute appends the "+id<Id>" attribute to a GPU-instance profile name: "1g.12gb" →
// "1g.12gb+id3", "1g.12gb+me" → "1g.12gb+me,id3". A name with a "-" suffix gets it in the same
// list ("1g.12gb-me,id3"), which ParseProfile reads as a removed attribute: only the name's
// uniqueness matters there.
func WithIDAttribute(name string, id int) string {
	attr := IDAttribute + strconv.Itoa(id)
	if strings.ContainsAny(name, "+-") {
		return name + "," + attr
	}
	return name + "+" + attr
}

// DisambiguateProfileNames makes the names of one GPU's GPU-instance profiles unique, in place,
// and returns the names that were ambiguous, sorted. ProfileName rounds memory to eighths of the
// GPU, so on a GPU the catalog does not know two profiles with the same slice count and suffix
// but different memory can get one name; a claim for that name could then get either. Every
// profile of such a group is renamed WithIDAttribute (its NVML profile Id, unique per GPU), so
// none is silently merged with another: Model.Profile finds each by its new name, and the
// ambiguous name matches none. The result depends only on the profiles, not on their order.
func DisambiguateProfileNames(profiles []GIProfile) []string {
	byName := map[string][]int{}
	for i := range profiles {
		byName[profiles[i].Name] = append(byName[profiles[i].Name], i)
	}
	var ambiguous []string
	for name, idx := range byName {
		if !collide(profiles, idx) {
			continue
		}
		ambiguous = append(ambiguous, name)
		for _, i := range idx {
			profiles[i].Name = WithIDAttribute(name, profiles[i].ID)
		}
	}
	slices.SortFunc(ambiguous, cmp.Compare)
	return ambiguous
}

// collide says whether the profiles at idx, which share a name, are different profiles (one
// profile listed twice under the same Id is not a collision).
func collide(profiles []GIProfile, idx []int) bool {
	for _, i := range idx[1:] {
		if profiles[i].ID != profiles[idx[0]].ID {
			return true
		}
	}
	return false
}
