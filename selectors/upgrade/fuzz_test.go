package upgrade_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/gpudra/gpudra/selectors/internal/seltest"
	"github.com/gpudra/gpudra/selectors/upgrade"
)

// FuzzUpgrade: the upgrader never panics, returns an Upgrade or an error, and upgrading its
// output again changes nothing.
func FuzzUpgrade(f *testing.F) {
	for _, file := range seltest.SeedFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {resourceClassName: gpu.nvidia.com, parametersRef: {kind: GpuClaimParameters, name: p}}\n---\napiVersion: gpu.resource.nvidia.com/v1alpha1\nkind: GpuClaimParameters\nmetadata: {name: p}\nspec: {selector: {orExpression: [{index: 1}, {andExpression: [{brand: '*'}]}]}}\n"))
	f.Add([]byte("kind: Pod\napiVersion: v1\nspec: {resourceClaims: [{name: a, source: {resourceClaimName: b}}]}\n"))
	f.Add([]byte("---\n---\n# only a comment\n"))
	u := upgrade.NewUpgrader("")
	f.Fuzz(func(t *testing.T, data []byte) {
		once, err := u.Upgrade(data)
		if once == nil {
			if err == nil {
				t.Fatal("no Upgrade and no error")
			}
			return
		}
		twice, err := u.Upgrade(once.Manifest)
		if twice == nil {
			t.Fatalf("the upgraded manifest does not read back: %v\n%s", err, once.Manifest)
		}
		if !bytes.Equal(once.Manifest, twice.Manifest) {
			t.Fatalf("upgrading twice changed the manifest:\n--- once\n%s\n--- twice\n%s", once.Manifest, twice.Manifest)
		}
	})
}
