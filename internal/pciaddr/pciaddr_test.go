package pciaddr

import "testing"

func TestCanonical(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"00000000:B7:00.0", "0000:b7:00.0"}, {"0000:07:00.0", "0000:07:00.0"}, {"00000019:01:00.0", "0019:01:00.0"},
		{" 0000:07:1F.7\n", "0000:07:1f.7"}, {"10000:e1:00.0", "10000:e1:00.0"},
	} {
		if got, err := Canonical(tt.in); err != nil || got != tt.want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "07:00.0", "0000:07:00", "0000:100:00.0", "0000:07:20.0", "0000:07:00.8", "100000000:00:00.0", "zz:00:00.0"} {
		if got, err := Canonical(bad); err == nil {
			t.Errorf("Canonical(%q) = %q, want an error", bad, got)
		}
	}
}
