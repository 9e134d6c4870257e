package checkpoint

import (
	"testing"
)

// FuzzDecode: checkpoint bytes (a torn write, another version, a hand edit) never panic the
// decoder; what it accepts encodes again.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"data":{}}`, `{"version":2}`, `{"version":0}`, `{"version":99}`, `null`, ``, `{`,
		`{"version":1,"checksum":"x","data":{"claims":{"u":{"uid":"u"}}}}`,
	} {
		f.Add([]byte(s))
	}
	if b, err := encode(State{}, "boot"); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decode("fuzz", b)
		if err != nil {
			return
		}
		if _, err := encode(d.state, "boot"); err != nil {
			t.Fatalf("decoded state does not encode: %v", err)
		}
	})
}
