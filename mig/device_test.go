package mig

import (
	"strconv"
	"testing"
)

func TestProfileName(t *testing.T) {
	// The research's worked example: A100-40GB 1g is 4864 of 40960 MiB → 1/8 → 5 GB.
	tests := []struct {
		enum, g    int
		mem, total uint64
		want       string
	}{
		{0, 1, 4864, 40960, "1g.5gb"},
		{7, 1, 4864, 40960, "1g.5gb+me"},
		{9, 1, 9856, 40960, "1g.10gb"},
		{2, 3, 19968, 40960, "3g.20gb"},
		{4, 7, 40192, 40960, "7g.40gb"},
		{13, 1, 24064, 97887, "1g.24gb-me"},
		{15, 1, 24064, 97887, "1g.24gb+me.all"},
		{10, 1, 24064, 97887, "1g.24gb+gfx"},
		// No GPU memory reported (unified memory): the profile's own GiB, rounded up.
		{0, 1, 4864, 0, "1g.5gb"},
		{0, 2, 16384, 0, "2g.16gb"},
	}
	for _, tt := range tests {
		if got := ProfileName(tt.enum, tt.g, tt.mem, tt.total); got != tt.want {
			t.Errorf("ProfileName(%d, %d, %d, %d) = %q, want %q", tt.enum, tt.g, tt.mem, tt.total, got, tt.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
